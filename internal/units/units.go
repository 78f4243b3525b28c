// Package units renders durations for m2n's reports.
package units

import "fmt"

// Seconds renders a duration given in seconds in s, ms or us with 4
// significant digits: "8.96 ms".
func Seconds(s float64) string {
	if s < 0 {
		return "-" + Seconds(-s)
	}
	switch {
	case s >= 1:
		return fmt.Sprintf("%.4g s", s)
	case s >= 1e-3:
		return fmt.Sprintf("%.4g ms", s*1e3)
	}
	return fmt.Sprintf("%.4g us", s*1e6)
}
