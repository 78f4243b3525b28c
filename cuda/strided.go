package cuda

import (
	"fmt"

	"github.com/m2n-dev/m2n/strided"
)

// maxDims is the most outer dimensions a descriptor may have in the
// kernels.
const maxDims = 7

// checkDesc validates a descriptor for the kernels: strided.Desc.Validate,
// and at most maxDims outer dims. Its errors, like every error about a
// malformed descriptor or a pair that does not fit together, wrap
// strided.ErrInvalid.
func checkDesc(d strided.Desc) error {
	if err := d.Validate(); err != nil {
		return err
	}
	if len(d.Count) > maxDims {
		return fmt.Errorf("%w: %d outer dimensions, at most %d", strided.ErrInvalid, len(d.Count), maxDims)
	}
	return nil
}
