package cudamem

import "github.com/m2n-dev/m2n/fp8"

// FirstNonFinite is Memory.firstNonFinite, for quant_gpu_test.go.
func FirstNonFinite(m *Memory, g fp8.Grid, r FP8Region) error { return m.firstNonFinite(g, r) }
