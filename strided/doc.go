// Package strided describes where a box of a tensor sits in a rank's
// local buffer: a Desc is an offset, a contiguous run and the counts and
// strides of the outer dims, never a list of runs, so that a plan costs a
// few dozen bytes per transfer and a transport or a kernel walks the runs
// itself. It is the one descriptor every layer shares: the planner
// derives descriptors (Describe, DescribeView), the transports move them
// (MPI derived datatypes, the GPU pack kernels) and package fp8 quantizes
// through them.
//
//	// rows 2..4 of columns 1..3 of a dense 4x5 float32 part:
//	d := strided.Describe(local, sub, 4)
//	// d.Offset 28, d.Run 8, d.Count [2], d.Stride [20]
//	d.ForEachRun(func(off int64) { /* copy buf[off:off+d.Run] */ })
package strided
