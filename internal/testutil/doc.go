// Package testutil holds, in its subpackages, what m2n's tests share and
// its programs never import: mpitest runs a test as a real multi-process
// MPI job, gputest gives a test a GPU or skips it with the reason,
// layouttest builds layouts from their spellings, nccltest gives a test
// the GPU with NCCL and a one-rank communicator, goldentest compares
// output with a golden file in testdata/ (-rewrite accepts it),
// frameworktest is the stored form of the framework conformance suite
// (testdata/frameworks), which model's tests write and refit's read,
// scheduletest the schedule digests' format (reshard's and sim's). The
// rest of internal/ is plumbing the library itself runs on.
package testutil
