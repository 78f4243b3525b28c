//go:build amd64 && !purego

#include "textflag.h"

// func addRowsAVX2(acc *float32, n int, alpha *float32, a *float32, stride int, r int)
//
// For 32 (then 8) elements of acc at a time, held in registers across the
// rows: for each row k in order, acc += alpha[k] * a[k][...], a VMULPS
// then a VADDPS (two roundings, as the scalar loop's product and sum).
TEXT ·addRowsAVX2(SB), NOSPLIT, $0-48
	MOVQ acc+0(FP), DI
	MOVQ n+8(FP), CX
	MOVQ alpha+16(FP), SI
	MOVQ a+24(FP), DX
	MOVQ stride+32(FP), R8
	SHLQ $2, R8
	MOVQ r+40(FP), R9

loop32:
	CMPQ CX, $32
	JLT  loop8
	VMOVUPS (DI), Y0
	VMOVUPS 32(DI), Y1
	VMOVUPS 64(DI), Y2
	VMOVUPS 96(DI), Y3
	MOVQ SI, R10
	MOVQ DX, R11
	MOVQ R9, R12

rows32:
	VBROADCASTSS (R10), Y4
	VMULPS (R11), Y4, Y5
	VADDPS Y5, Y0, Y0
	VMULPS 32(R11), Y4, Y6
	VADDPS Y6, Y1, Y1
	VMULPS 64(R11), Y4, Y7
	VADDPS Y7, Y2, Y2
	VMULPS 96(R11), Y4, Y8
	VADDPS Y8, Y3, Y3
	ADDQ $4, R10
	ADDQ R8, R11
	DECQ R12
	JNZ  rows32
	VMOVUPS Y0, (DI)
	VMOVUPS Y1, 32(DI)
	VMOVUPS Y2, 64(DI)
	VMOVUPS Y3, 96(DI)
	ADDQ $128, DI
	ADDQ $128, DX
	SUBQ $32, CX
	JMP  loop32

loop8:
	CMPQ CX, $8
	JLT  done
	VMOVUPS (DI), Y0
	MOVQ SI, R10
	MOVQ DX, R11
	MOVQ R9, R12

rows8:
	VBROADCASTSS (R10), Y4
	VMULPS (R11), Y4, Y5
	VADDPS Y5, Y0, Y0
	ADDQ $4, R10
	ADDQ R8, R11
	DECQ R12
	JNZ  rows8
	VMOVUPS Y0, (DI)
	ADDQ $32, DI
	ADDQ $32, DX
	SUBQ $8, CX
	JMP  loop8

done:
	VZEROUPPER
	RET
