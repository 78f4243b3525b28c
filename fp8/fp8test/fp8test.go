// Package fp8test loads the FP8 conformance cases (testdata/fp8: inputs,
// outputs and scales that torch made on an H200) for the tests of every
// package that quantizes: fp8 on the CPU, cuda's kernels, refit quantize;
// and Random, the random tensors their generated cases quantize.
package fp8test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/m2n-dev/m2n/dtype"
	"github.com/m2n-dev/m2n/fp8"
)

// Case is one conformance case with its files read.
type Case struct {
	Name       string  `json:"name"`
	ModeName   string  `json:"mode"`
	Shape      []int64 `json:"shape"`
	Block      []int64 `json:"block"`
	ScaleShape []int64 `json:"scale_shape"`
	InputFile  string  `json:"input"`
	OutputFile string  `json:"output"`
	ScaleFile  string  `json:"scale"`

	Mode   fp8.Mode    `json:"-"`
	DType  dtype.DType `json:"-"` // of the input: bf16
	Input  []byte      `json:"-"` // raw little-endian source elements
	Output []byte      `json:"-"` // E4M3 bytes
	Scales []byte      `json:"-"` // raw little-endian float32 scales
}

// String names the case as "edges_300x200/row".
func (c Case) String() string { return c.Name + "/" + c.ModeName }

// File is what cases.json holds.
type File struct {
	Rule   string `json:"rule"`
	MadeBy string `json:"made_by"`
	Cases  []Case `json:"cases"`
}

// Load reads dir/cases.json and every case's files.
func Load(dir string) (File, error) {
	b, err := os.ReadFile(filepath.Join(dir, "cases.json"))
	if err != nil {
		return File{}, err
	}
	var f File
	if err := json.Unmarshal(b, &f); err != nil {
		return File{}, fmt.Errorf("%s: %w", filepath.Join(dir, "cases.json"), err)
	}
	if len(f.Cases) == 0 {
		return File{}, fmt.Errorf("%s: no cases", dir)
	}
	for i := range f.Cases {
		c := &f.Cases[i]
		if c.Mode, err = fp8.ParseMode(c.ModeName); err != nil {
			return File{}, fmt.Errorf("case %v: %w", c, err)
		}
		c.DType = dtype.BF16
		for _, p := range []struct {
			name string
			dst  *[]byte
		}{{c.InputFile, &c.Input}, {c.OutputFile, &c.Output}, {c.ScaleFile, &c.Scales}} {
			if *p.dst, err = os.ReadFile(filepath.Join(dir, p.name)); err != nil {
				return File{}, fmt.Errorf("case %v: %w", c, err)
			}
		}
	}
	return f, nil
}
