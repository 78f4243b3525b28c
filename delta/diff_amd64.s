//go:build amd64 && !purego

#include "textflag.h"

// func diffMasksAVX2(a, b *byte, n int, out *uint64)
//
// Per 64 bytes: two 32-byte compares of a with b, their byte masks
// joined into one word and inverted (a set bit: the byte differs).
TEXT ·diffMasksAVX2(SB), NOSPLIT, $0-32
	MOVQ a+0(FP), SI
	MOVQ b+8(FP), DI
	MOVQ n+16(FP), CX
	MOVQ out+24(FP), DX

loop:
	TESTQ CX, CX
	JZ    done
	VMOVDQU   (SI), Y0
	VMOVDQU   32(SI), Y1
	VPCMPEQB  (DI), Y0, Y0
	VPCMPEQB  32(DI), Y1, Y1
	VPMOVMSKB Y0, AX
	VPMOVMSKB Y1, BX
	SHLQ      $32, BX
	ORQ       BX, AX
	NOTQ      AX
	MOVQ      AX, (DX)
	ADDQ      $64, SI
	ADDQ      $64, DI
	ADDQ      $8, DX
	DECQ      CX
	JMP       loop

done:
	VZEROUPPER
	RET

// func blockDiffAVX2(a, b *byte, elem, n int, out *[8]uint32)
//
// n full blocks (BlockElems elements of elem bytes: 1, 2 or 4) of a
// against b, one after the other: out[k] holds one bit per element of
// block k, set where it differs, element i at bit i%32 of out[k][i/32].
// Elements compare as wholes (VPCMPEQB/W/D), and the lane results are
// packed to one bit each. n is at least 1.
TEXT ·blockDiffAVX2(SB), NOSPLIT, $0-40
	MOVQ a+0(FP), SI
	MOVQ b+8(FP), DI
	MOVQ elem+16(FP), AX
	MOVQ n+24(FP), CX
	MOVQ out+32(FP), DX
	SHLQ $3, CX // 8 words per block
	CMPQ AX, $2
	JEQ  two
	CMPQ AX, $1
	JEQ  one

four: // 32 elements: 128 bytes per word
	VMOVDQU   (SI), Y0
	VMOVDQU   32(SI), Y1
	VMOVDQU   64(SI), Y2
	VMOVDQU   96(SI), Y3
	VPCMPEQD  (DI), Y0, Y0
	VPCMPEQD  32(DI), Y1, Y1
	VPCMPEQD  64(DI), Y2, Y2
	VPCMPEQD  96(DI), Y3, Y3
	VMOVMSKPS Y0, AX
	VMOVMSKPS Y1, BX
	SHLL      $8, BX
	ORL       BX, AX
	VMOVMSKPS Y2, BX
	SHLL      $16, BX
	ORL       BX, AX
	VMOVMSKPS Y3, BX
	SHLL      $24, BX
	ORL       BX, AX
	NOTL      AX
	MOVL      AX, (DX)
	ADDQ      $128, SI
	ADDQ      $128, DI
	ADDQ      $4, DX
	DECQ      CX
	JNZ       four
	JMP       done

two: // 32 elements: 64 bytes per word
	VMOVDQU   (SI), Y0
	VMOVDQU   32(SI), Y1
	VPCMPEQW  (DI), Y0, Y0
	VPCMPEQW  32(DI), Y1, Y1
	VPACKSSWB Y1, Y0, Y0 // per 128-bit lane: 8 words of Y0, then 8 of Y1
	VPERMQ    $0xd8, Y0, Y0 // back in element order
	VPMOVMSKB Y0, AX
	NOTL      AX
	MOVL      AX, (DX)
	ADDQ      $64, SI
	ADDQ      $64, DI
	ADDQ      $4, DX
	DECQ      CX
	JNZ       two
	JMP       done

one: // 32 elements: 32 bytes per word
	VMOVDQU   (SI), Y0
	VPCMPEQB  (DI), Y0, Y0
	VPMOVMSKB Y0, AX
	NOTL      AX
	MOVL      AX, (DX)
	ADDQ      $32, SI
	ADDQ      $32, DI
	ADDQ      $4, DX
	DECQ      CX
	JNZ       one

done:
	VZEROUPPER
	RET
