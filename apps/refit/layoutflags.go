package main

import (
	"errors"
	"fmt"

	"github.com/m2n-dev/m2n/modelspec"
	"github.com/m2n-dev/m2n/placement"
	"github.com/spf13/pflag"
)

// pairFlags are the flags that describe a reshard (modelspec.Pair): one
// tensor, a source layout and a destination layout over one
// communicator.
type pairFlags struct{ modelspec.Pair }

func (f *pairFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&f.Shape, "shape", "", "global tensor shape, e.g. 7168x2048 (scalar for 0 dims)")
	fs.StringVar(&f.DType, "dtype", "f32", "element type: bf16 f16 f32 f64 i8 u8 i32 i64 fp8e4m3 fp8e5m2")
	fs.StringVar(&f.Src.Mesh, "src-mesh", "", "source mesh shape, e.g. 4 or 2x2")
	fs.StringVar(&f.Src.Placements, "src-placements", "", "source placements, one per mesh axis, e.g. S0 or S0,R")
	fs.StringVar(&f.Dst.Mesh, "dst-mesh", "", "destination mesh shape, e.g. 2x2")
	fs.StringVar(&f.Dst.Placements, "dst-placements", "", "destination placements, e.g. R,S1")
	fs.StringVar(&f.Src.Ranks, "src-ranks", "", "source ranks in mesh order (default 0..M-1), e.g. 0-3 or 8,3,5,1")
	fs.StringVar(&f.Dst.Ranks, "dst-ranks", "", "destination ranks in mesh order (default M..M+N-1)")
	fs.IntVar(&f.World, "world", 0, "communicator size (default: the highest rank + 1)")
}

// layouts parses the flags into the two layouts and the world size
// (modelspec.Pair.Layouts); every error names the flag and its value.
func (f *pairFlags) layouts() (src, dst placement.Layout, world int, err error) {
	src, dst, world, err = f.Layouts()
	return src, dst, world, pairError(err)
}

// requiredExample is an example value of each layout flag, for the error
// that says it is required.
var requiredExample = map[string]string{"shape": "7168x2048", "src-mesh": "4x2", "dst-mesh": "4x2",
	"src-placements": "S0,R", "dst-placements": "S0,R"}

// pairError turns an error of modelspec.Pair or modelspec.Side into a
// usage error naming the flag and its value, or saying that the flag is
// required.
func pairError(err error) error {
	var e *modelspec.Error
	switch {
	case err == nil:
		return nil
	case !errors.As(err, &e):
		return usageError{err}
	case errors.Is(e.Err, modelspec.ErrRequired):
		return usageError{fmt.Errorf("--%s is required (e.g. --%s %s)", e.Field, e.Field, requiredExample[e.Field])}
	}
	return flagError(e.Field, e.Value, e.Err)
}
