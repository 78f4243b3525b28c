// Package gpu holds the step runtime's GPU drivers: a Replay moves a call's
// step on one GPU with no host wait between rounds, queuing every round's
// batched pack, copy and unpack kernels and its NCCL groups on the GPU's
// streams, ordered by events (the replay driver), or launching the same
// step captured once as a CUDA graph (the graph driver). The runtime
// (package refit) owns the step around it: the buffer check and the
// call's identity agreed before a byte moves, the completion agreement
// after. Package session picks the driver when a call is prepared on a GPU
// session; a program never needs this package, but for a Replay's
// GraphError:
//
//	if r, ok := call.Driver().(*gpu.Replay); ok && r.GraphError() != nil {
//		// the capture was refused: the step is queued command by command
//	}
package gpu
