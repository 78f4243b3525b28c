//go:build amd64 && !purego

#include "textflag.h"

// AVX2 kernels of the quantizer's inner loops (see quant_amd64.go). Each
// lane does what the scalar loops of pack.go do, with the same IEEE
// operations in the same order: the element widened to float64 (exact),
// one float64 multiply by the reciprocal of the scale (rounded to
// nearest), one conversion to float32 (rounded to nearest), then Encode's
// E4M3 rounding in integer arithmetic. So every byte is the scalar loop's.

// SETUP broadcasts the constants of ENCODE8:
//   Y15 0x7F800000 (exponent bits)     Y14 0x7FFFFFFF (magnitude)
//   Y13 0x3C800000 (2^-6, min normal)  Y12 0x43DFFFFF (below 448)
//   Y11 0x0007FFFF (rounding)          Y9  960 (120<<3, the rebias)
//   Y8  0x46800000 (16384.0)           Y7  0x7E (448, the clamp)
//   Y6  0x80 (sign)                    Y5  the scale (float32)
//   Y4  VPSHUFB mask: each lane's dword bytes 0, 4, 8, 12 to bytes 0-3
#define SETUP \
	MOVL $0x7F800000, AX; VMOVD AX, X15; VPBROADCASTD X15, Y15; \
	MOVL $0x7FFFFFFF, AX; VMOVD AX, X14; VPBROADCASTD X14, Y14; \
	MOVL $0x3C800000, AX; VMOVD AX, X13; VPBROADCASTD X13, Y13; \
	MOVL $0x43DFFFFF, AX; VMOVD AX, X12; VPBROADCASTD X12, Y12; \
	MOVL $0x0007FFFF, AX; VMOVD AX, X11; VPBROADCASTD X11, Y11; \
	MOVL $960, AX; VMOVD AX, X9; VPBROADCASTD X9, Y9; \
	MOVL $0x46800000, AX; VMOVD AX, X8; VPBROADCASTD X8, Y8; \
	MOVL $0x7E, AX; VMOVD AX, X7; VPBROADCASTD X7, Y7; \
	MOVL $0x80, AX; VMOVD AX, X6; VPBROADCASTD X6, Y6; \
	VBROADCASTSS scale+24(FP), Y5; \
	MOVQ $0x808080800C080400, AX; VMOVQ AX, X4; VPBROADCASTQ X4, Y4

// ENCODE8 quantizes the 8 float32 elements (bits) in Y0 into the 8 bytes
// at (DI), or jumps to bad, writing nothing, when an element or its
// quotient is not finite (the scalar loop then takes over). It uses Y0-Y3
// and Y10.
#define ENCODE8(bad) \
	VPAND Y15, Y0, Y1; \
	VPCMPEQD Y15, Y1, Y1; \
	VPTEST Y1, Y1; \
	JNZ bad; \
	VDIVPS Y5, Y0, Y0; \
	VPAND Y14, Y0, Y1; \
	VPAND Y15, Y1, Y3; \
	VPCMPEQD Y15, Y3, Y3; \
	VPTEST Y3, Y3; \
	JNZ bad; \
	VPSRLD $24, Y0, Y0; \
	VPAND Y6, Y0, Y0; \
	VPSRLD $20, Y1, Y2; \
	VPSLLD $31, Y2, Y2; \
	VPSRLD $31, Y2, Y2; \
	VPADDD Y1, Y2, Y2; \
	VPADDD Y11, Y2, Y2; \
	VPSRLD $20, Y2, Y2; \
	VPSUBD Y9, Y2, Y2; \
	VADDPS Y8, Y1, Y3; \
	VPSUBD Y8, Y3, Y3; \
	VPCMPGTD Y1, Y13, Y10; \
	VPBLENDVB Y10, Y3, Y2, Y2; \
	VPCMPGTD Y12, Y1, Y10; \
	VPBLENDVB Y10, Y7, Y2, Y2; \
	VPOR Y0, Y2, Y2; \
	VPSHUFB Y4, Y2, Y2; \
	VEXTRACTI128 $1, Y2, X3; \
	VPUNPCKLDQ X3, X2, X2; \
	VMOVQ X2, (DI)

// func quantBF16AVX2(dst, src *byte, n int, inv float64) int
TEXT ·quantBF16AVX2(SB), NOSPLIT, $0-40
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	SETUP
	XORQ BX, BX
	SHRQ $3, CX
	JZ   bdone
bloop:
	VPMOVZXWD (SI), Y0
	VPSLLD $16, Y0, Y0
	ENCODE8(bdone)
	ADDQ $16, SI
	ADDQ $8, DI
	ADDQ $8, BX
	DECQ CX
	JNZ  bloop
bdone:
	VZEROUPPER
	MOVQ BX, ret+32(FP)
	RET

// func quantF32AVX2(dst, src *byte, n int, inv float64) int
TEXT ·quantF32AVX2(SB), NOSPLIT, $0-40
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	SETUP
	XORQ BX, BX
	SHRQ $3, CX
	JZ   fdone
floop:
	VMOVDQU (SI), Y0
	ENCODE8(fdone)
	ADDQ $32, SI
	ADDQ $8, DI
	ADDQ $8, BX
	DECQ CX
	JNZ  floop
fdone:
	VZEROUPPER
	MOVQ BX, ret+32(FP)
	RET

// func amaxBF16AVX2(src *byte, n int) uint16
// The largest magnitude bits of n bfloat16 values, n a multiple of 32.
TEXT ·amaxBF16AVX2(SB), NOSPLIT, $0-18
	MOVQ src+0(FP), SI
	MOVQ n+8(FP), CX
	MOVL $0x7FFF7FFF, AX
	VMOVD AX, X15
	VPBROADCASTD X15, Y15
	VPXOR Y0, Y0, Y0
	VPXOR Y1, Y1, Y1
	SHRQ $5, CX
	JZ   areduce
aloop:
	VPAND (SI), Y15, Y2
	VPAND 32(SI), Y15, Y3
	VPMAXUW Y2, Y0, Y0
	VPMAXUW Y3, Y1, Y1
	ADDQ $64, SI
	DECQ CX
	JNZ  aloop
areduce:
	VPMAXUW Y1, Y0, Y0
	VEXTRACTI128 $1, Y0, X1
	VPMAXUW X1, X0, X0
	VPSRLDQ $8, X0, X1
	VPMAXUW X1, X0, X0
	VPSRLDQ $4, X0, X1
	VPMAXUW X1, X0, X0
	VPSRLDQ $2, X0, X1
	VPMAXUW X1, X0, X0
	VPEXTRW $0, X0, AX
	VZEROUPPER
	MOVW AX, ret+16(FP)
	RET

// func amaxF32AVX2(src *byte, n int) uint32
// The largest magnitude bits of n float32 values, n a multiple of 16.
TEXT ·amaxF32AVX2(SB), NOSPLIT, $0-20
	MOVQ src+0(FP), SI
	MOVQ n+8(FP), CX
	MOVL $0x7FFFFFFF, AX
	VMOVD AX, X15
	VPBROADCASTD X15, Y15
	VPXOR Y0, Y0, Y0
	VPXOR Y1, Y1, Y1
	SHRQ $4, CX
	JZ   freduce
faloop:
	VPAND (SI), Y15, Y2
	VPAND 32(SI), Y15, Y3
	VPMAXUD Y2, Y0, Y0
	VPMAXUD Y3, Y1, Y1
	ADDQ $64, SI
	DECQ CX
	JNZ  faloop
freduce:
	VPMAXUD Y1, Y0, Y0
	VEXTRACTI128 $1, Y0, X1
	VPMAXUD X1, X0, X0
	VPSRLDQ $8, X0, X1
	VPMAXUD X1, X0, X0
	VPSRLDQ $4, X0, X1
	VPMAXUD X1, X0, X0
	VMOVD X0, AX
	VZEROUPPER
	MOVL AX, ret+16(FP)
	RET
