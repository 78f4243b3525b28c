// Package frameworktest holds the stored form of the framework conformance
// suite (testdata/frameworks): model's TestFrameworkConformance writes its
// cases from its independent reference of Megatron-Core and vLLM, and
// refit layouts' tests read them back, both through these types.
package frameworktest

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

// Case is the stored form of a case: the case, the transformers tensors,
// and for every rank its buffers as runs [buffer offset, count, tensor,
// flat index, flat step] (elements in no run hold nothing: padding, or a
// parameter left alone).
type Case struct {
	Case      string   `json:"case"`
	Config    string   `json:"config"`
	MTP       bool     `json:"mtp"`
	Train     string   `json:"train"`
	Gen       string   `json:"gen"`
	FP8       string   `json:"fp8"`
	Note      string   `json:"note"`
	Tensors   []Tensor `json:"tensors"`
	Trainer   []Rank   `json:"trainer"`
	Generator []Rank   `json:"generator"`
}

// Tensor is one of a case's transformers tensors.
type Tensor struct {
	Name  string  `json:"name"`
	Shape []int64 `json:"shape"`
}

// Rank is what one rank of a framework holds (Stage -1: a generator rank).
type Rank struct {
	Stage   int      `json:"stage"`
	Rank    int      `json:"rank"`
	Buffers []Buffer `json:"buffers"`
}

// Buffer is one of a rank's buffers: its elements, whether it holds FP8,
// and its runs.
type Buffer struct {
	Name  string     `json:"name"`
	Elems int        `json:"elems"`
	FP8   bool       `json:"fp8"`
	Runs  [][5]int64 `json:"runs"`
}

// Read reads every case stored in dir (its *.json files), failing t where
// it finds none or one does not read.
func Read(t testing.TB, dir string) []Case {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no suite cases in %s: %v", dir, err)
	}
	var out []Case
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var c Case
		if err := json.Unmarshal(data, &c); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		out = append(out, c)
	}
	return out
}
