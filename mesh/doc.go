// Package mesh describes N-D meshes of communicator-local ranks.
//
// A mesh is the process-group half of a DTensor layout: an array of ranks
// with one axis per kind of parallelism (say DP x TP), stored row-major.
// The common case is an interval of ranks:
//
//	m, _ := mesh.Interval([]int{2, 4}, 8) // ranks 8..15, coordinate (1, 2) is rank 14
//
// and any explicit order works too:
//
//	m, _ := mesh.New([]int{2, 2}, []int{7, 5, 6, 4})
//
// Ranks are local to the communicator a reshard runs on: with pipeline
// parallelism each stage has its own communicator, and the same global rank
// can have a different local rank in each. ParseShape and ParseRanks read the
// command-line spellings "4x2", "0-7" and "8,3,5".
package mesh
