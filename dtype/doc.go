// Package dtype names the element types of m2n's tensors and their sizes
// in bytes: bf16, f16, f32, f64, i8, u8, i32, i64 and the two FP8 formats.
// The planner moves bytes; a layout's dtype fixes how many bytes an element
// is. Parse reads m2n's short names and PyTorch's.
//
//	dt, err := dtype.Parse("torch.bfloat16") // dtype.BF16, 2 bytes
//	l, err := placement.NewLayout([]int64{7168, 2048}, dt, m, ps)
package dtype
