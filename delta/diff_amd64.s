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
