package cuda

import (
	"fmt"

	"github.com/m2n-dev/m2n/strided"
)

// MaxDims is the most outer dimensions a descriptor may have in the
// kernels.
const MaxDims = 7

// ErrBadStrided is strided.ErrInvalid: every error about a malformed
// descriptor, or a pair that does not fit together, wraps it.
var ErrBadStrided = strided.ErrInvalid

// checkDesc validates a descriptor for the kernels: strided.Desc.Validate,
// and at most MaxDims outer dims.
func checkDesc(d strided.Desc) error {
	if err := d.Validate(); err != nil {
		return err
	}
	if len(d.Count) > MaxDims {
		return fmt.Errorf("%w: %d outer dimensions, at most %d", ErrBadStrided, len(d.Count), MaxDims)
	}
	return nil
}
