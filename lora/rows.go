package lora

// addRows adds alpha[k] x a[k*stride+j] to acc[j] for every k < len(alpha)
// in order and every j < len(acc), each product rounded to float32 before
// it is added (no fused multiply-add: the merge's sum is defined so). The
// rows of a are read from a[0:] with stride elements between them.
func addRows(acc, alpha, a []float32, stride int) {
	n := len(acc)
	if n == 0 || len(alpha) == 0 {
		return
	}
	_ = a[(len(alpha)-1)*stride+n-1] // bounds, once
	done := 0
	if useAVX2 && n >= 8 {
		done = n &^ 7
		addRowsAVX2(&acc[0], done, &alpha[0], &a[0], stride, len(alpha))
	}
	addRowsScalar(acc[done:], alpha, a[done:], stride)
}

// addRowsScalar is addRows one element at a time.
func addRowsScalar(acc, alpha, a []float32, stride int) {
	for k, al := range alpha {
		row := a[k*stride : k*stride+len(acc)]
		for j := range acc {
			acc[j] += float32(al * row[j])
		}
	}
}
