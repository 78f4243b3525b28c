package main

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/m2n-dev/m2n/fp8/fp8test"
)

// TestQuantizeConformance runs refit quantize on every torch conformance
// input and compares both output files with torch's, byte for byte.
func TestQuantizeConformance(t *testing.T) {
	f, err := fp8test.Load("../../testdata/fp8")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for _, c := range f.Cases {
		shape := make([]string, len(c.Shape))
		for i, n := range c.Shape {
			shape[i] = strconv.FormatInt(n, 10)
		}
		out, scale := filepath.Join(dir, c.Name+"."+c.ModeName+".e4m3"), filepath.Join(dir, c.Name+"."+c.ModeName+".scale")
		stdout, err := runRefit(t, "quantize", "--in", filepath.Join("../../testdata/fp8", c.InputFile), "--shape", strings.Join(shape, "x"),
			"--mode", c.ModeName, "--out", out, "--scale-out", scale, "--json")
		if err != nil {
			t.Fatalf("%v: %v\n%s", c, err, stdout)
		}
		var j quantizeJSON
		if err := json.Unmarshal([]byte(stdout), &j); err != nil || j.Elements != len(c.Output) || len(j.ScaleShape) != len(c.ScaleShape) {
			t.Errorf("%v: summary %s (%v)", c, stdout, err)
		}
		for _, p := range []struct {
			file string
			want []byte
		}{{out, c.Output}, {scale, c.Scales}} {
			got, err := os.ReadFile(p.file)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, p.want) {
				t.Errorf("%v: %s differs from torch's (%d bytes, torch %d)", c, filepath.Base(p.file), len(got), len(p.want))
			}
		}
	}
}

func TestQuantizeErrors(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "in.bf16")
	raw := make([]byte, 2*4*8)
	binary.LittleEndian.PutUint16(raw[2*13:], 0x7FC0) // NaN at [1 5]
	if err := os.WriteFile(in, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	out, scale := filepath.Join(dir, "o"), filepath.Join(dir, "s")
	for _, c := range []struct {
		args  []string
		usage bool
		want  string
	}{
		{[]string{"--in", in, "--shape", "4x8", "--out", out, "--scale-out", scale}, false, "element [1 5] (flat index 13) is NaN"},
		{[]string{"--in", in, "--shape", "4x9", "--out", out, "--scale-out", scale}, true, "holds 64 bytes; a 4x9 bf16 tensor is 72 bytes"},
		{[]string{"--in", in, "--shape", "32", "--out", out, "--scale-out", scale}, true, "needs 2 to 8 dims"},
		{[]string{"--in", in, "--shape", "4x8", "--mode", "col", "--out", out, "--scale-out", scale}, true, `--mode "col"`},
		{[]string{"--in", in, "--shape", "4x8", "--dtype", "f16", "--out", out, "--scale-out", scale}, true, "want bf16 or f32"},
		{[]string{"--in", in, "--shape", "4x8", "--out", out}, true, "--scale-out is required"},
	} {
		_, err := runRefit(t, append([]string{"quantize"}, c.args...)...)
		var ue usageError
		if err == nil || !strings.Contains(err.Error(), c.want) || errors.As(err, &ue) != c.usage {
			t.Errorf("%v: got %v (usage %v), want %q (usage %v)", c.args, err, errors.As(err, &ue), c.want, c.usage)
		}
	}
}
