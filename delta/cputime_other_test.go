//go:build !unix

package delta

import "time"

// cpuTime is not measured here: the benchmarks report wall-clock MB/s only.
func cpuTime() time.Duration { return 0 }
