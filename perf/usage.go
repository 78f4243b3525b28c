package perf

import (
	"os"
	"runtime"
	"strconv"
	"strings"

	"github.com/m2n-dev/m2n/mpi"
)

// Usage is one rank's footprint at one moment.
type Usage struct {
	RSS        int64 // resident memory
	Heap       int64 // live Go heap after a collection
	Goroutines int64
	Requests   int64 // MPI requests pending (mpi.Live)
	Comms      int64 // MPI communicators held
}

// MeasureUsage collects garbage and measures this process's footprint.
func MeasureUsage() (Usage, error) {
	runtime.GC()
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return Usage{}, err
	}
	fs := strings.Fields(string(b))
	pages, _ := strconv.ParseInt(fs[1], 10, 64)
	req, comms := mpi.Live()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return Usage{RSS: pages * int64(os.Getpagesize()), Heap: int64(ms.HeapAlloc), Goroutines: int64(runtime.NumGoroutine()),
		Requests: req, Comms: comms}, nil
}

// peakRSS reads this process's peak resident memory (VmHWM), 0 where it
// cannot.
func peakRSS() int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			if f := strings.Fields(rest); len(f) > 0 {
				kb, _ := strconv.ParseInt(f[0], 10, 64)
				return kb << 10
			}
		}
	}
	return 0
}
