// Package faults reads m2n's test-only fault switches, environment
// variables that make one rank of a job misbehave on purpose, so that
// tests can prove every failure is caught, bounded and named, and builds
// the transports and stops they ask for. A program reads them once per
// rank (Transport, At, StopHere); nothing reads them in production.
//
// Each switch names a rank, "rank" or "rank:n":
//
//	M2N_FAULT_KILL=r:n     rank r kills itself (SIGKILL) when it starts round n
//	M2N_FAULT_HANG=r:n     rank r stops for good at round n (alive, stuck)
//	M2N_FAULT_WIRE=r[:n]   rank r flips one byte of the first message it receives (from round n on)
//	M2N_FAULT_CORRUPT=r:b  rank r flips byte b of its destination before --check
//	M2N_FAULT_SHORT_DST=r  rank r's destination buffer is one byte short
//	M2N_FAULT_NAN=r:i      rank r makes element i of its source part a NaN
//	M2N_FAULT_STOP=r:where rank r stops its process (SIGSTOP) at a point
//	M2N_FAULT_PANIC=r:where rank r panics at one of those points
//	M2N_FAULT_CALL=c       the transport switches arm from the rank's call c on
//
// Rounds are the rank's, counted over every call it prepares (from call
// M2N_FAULT_CALL on) in every pipeline stage and model, not each call's
// own (Transport).
package faults
