package main

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/m2n-dev/m2n/fp8"
	"github.com/m2n-dev/m2n/internal/testutil/mpitest"
	"github.com/m2n-dev/m2n/modelspec"
)

// The LoRA adapters testdata/lora_fp8.c prepares: rank 8, alpha 16.
const loraRank, loraAlpha = 8, 16.0

// TestCLoRAFP8 runs testdata/lora_fp8.c on 3 ranks: a small Llama synced
// in full from a tp=2 trainer into a tp=1 generator serving FP8 (row
// scales; block scales on a model whose heads are whole 128-row blocks),
// then two LoRA steps merged through m2n_model_merge_lora_scales. Every
// byte of every destination buffer and every scale the generator holds
// after each merge is checked against a dense reference computed here
// from what the program wrote out: each adapted weight's FP8 base as the
// full sync delivered it, dequantized (fp8.Decode x its block's scale,
// in float32), plus (alpha/rank) (B @ A) of the step's adapters as they
// arrived (k in order, each product rounded to float32), re-quantized per
// block with package fp8's rule (the block's amax, fp8.ScaleOf,
// fp8.QuantizeValue); every other byte and scale as the full sync left
// it. The program itself checks that m2n_model_merge_lora (no scales),
// a scale buffer of another size and an unknown scale tensor are
// M2N_ERR_INVALID.
func TestCLoRAFP8(t *testing.T) {
	bin := cProgram(t, "lora_fp8")
	mpitest.Require(t)
	for _, tc := range []struct {
		mode   string
		config string
	}{
		{"row", `{"model_type": "llama", "hidden_size": 64, "head_dim": 16, "num_attention_heads": 4, "num_key_value_heads": 2,
			"intermediate_size": 96, "num_hidden_layers": 2, "vocab_size": 256, "dtype": "bfloat16"}`},
		// head_dim 128: each key-value group's rows are whole 128-row
		// blocks (else block scales are refused at prepare)
		{"block", `{"model_type": "llama", "hidden_size": 256, "head_dim": 128, "num_attention_heads": 4, "num_key_value_heads": 2,
			"intermediate_size": 256, "num_hidden_layers": 1, "vocab_size": 256, "dtype": "bfloat16"}`},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			dir := t.TempDir()
			cfg := filepath.Join(dir, "config.json")
			if err := os.WriteFile(cfg, []byte(tc.config), 0o644); err != nil {
				t.Fatal(err)
			}
			out := filepath.Join(dir, "out")
			if err := os.Mkdir(out, 0o755); err != nil {
				t.Fatal(err)
			}
			log, err := mpirunWithin(t, 90*time.Second, 3, nil, bin, cfg, tc.mode, out)
			if err != nil || !strings.Contains(log, "lora_fp8: passed") {
				t.Fatalf("lora_fp8 under mpirun: %v\n%s", err, log)
			}
			mode, err := fp8.ParseMode(tc.mode)
			if err != nil {
				t.Fatal(err)
			}
			checkLoRAFP8(t, out, mode)
		})
	}
}

// describedBuffer is what the tests read of a buffer or a scale tensor in
// m2n_model_describe's JSON; its parts are modelspec.Parts, as
// m2n_model_describe writes them.
type describedBuffer struct {
	Name  string           `json:"name"`
	DType string           `json:"dtype"`
	Bytes int64            `json:"bytes"`
	Parts []modelspec.Part `json:"parts"`
	// scale tensors
	Tensor string  `json:"tensor"`
	Shape  []int64 `json:"shape"`
	Offset []int64 `json:"offset"`
}

type described struct {
	Dst   []describedBuffer `json:"dst"`
	Scale []describedBuffer `json:"scale"`
}

func readJSON(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// readBuffers reads dir/phase/kind/NAME for every buffer of list, each
// checked to be its size.
func readBuffers(t *testing.T, dir, phase, kind string, list []describedBuffer) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	for _, b := range list {
		data, err := os.ReadFile(filepath.Join(dir, phase, kind, b.Name))
		if err != nil {
			t.Fatal(err)
		}
		if int64(len(data)) != b.Bytes {
			t.Fatalf("%s/%s/%s: %d bytes, want %d", phase, kind, b.Name, len(data), b.Bytes)
		}
		out[b.Name] = data
	}
	return out
}

// eachElem calls fn for every element of part p: its global index in
// p.LayoutShape (idx, reused between calls) and its element's index in its
// buffer.
func eachElem(p modelspec.Part, fn func(idx []int64, pos int64)) {
	nd := len(p.LocalShape)
	n := int64(1)
	for _, d := range p.LocalShape {
		n *= d
	}
	idx := make([]int64, nd)
	for e := range n {
		pos, q := p.ViewOffset, e
		for d := nd - 1; d >= 0; d-- {
			l := q % p.LocalShape[d]
			q /= p.LocalShape[d]
			idx[d] = p.Offset[d] + l
			pos += l * p.ViewStrides[d]
		}
		fn(idx, pos)
	}
}

// rowMajor is idx's row-major index in shape.
func rowMajor(idx, shape []int64) int64 {
	f := int64(0)
	for d := range shape {
		f = f*shape[d] + idx[d]
	}
	return f
}

// whole reports whether part p is its whole tensor.
func whole(p modelspec.Part) bool {
	for d := range p.LayoutShape {
		if p.Offset[d] != 0 || p.LocalShape[d] != p.LayoutShape[d] {
			return false
		}
	}
	return true
}

// elemAt is the buffer index of element f (row-major in the tensor's
// shape, which its layout shape reshapes) of a whole part p.
func elemAt(p modelspec.Part, f int64) int64 {
	pos := p.ViewOffset
	for d := len(p.LayoutShape) - 1; d >= 0; d-- {
		pos += f % p.LayoutShape[d] * p.ViewStrides[d]
		f /= p.LayoutShape[d]
	}
	return pos
}

func bf16At(b []byte, pos int64) float32 {
	return math.Float32frombits(uint32(binary.LittleEndian.Uint16(b[2*pos:])) << 16)
}

// checkLoRAFP8 checks what lora_fp8.c wrote into dir (TestCLoRAFP8).
func checkLoRAFP8(t *testing.T, dir string, mode fp8.Mode) {
	var m, ad described
	readJSON(t, filepath.Join(dir, "model.json"), &m)
	readJSON(t, filepath.Join(dir, "adapters.json"), &ad)
	adapterPart := map[string]describedBuffer{} // by adapter tensor: its buffer, with the one part
	for _, b := range ad.Dst {
		if len(b.Parts) != 1 {
			t.Fatalf("adapter buffer %s holds %d parts", b.Name, len(b.Parts))
		}
		adapterPart[b.Parts[0].Tensor] = b
	}
	scaleOf := map[string]describedBuffer{} // by weight tensor
	for _, s := range m.Scale {
		scaleOf[s.Tensor] = s
	}
	baseW, baseS := readBuffers(t, dir, "base", "dst", m.Dst), readBuffers(t, dir, "base", "scale", m.Scale)
	s := float32(loraAlpha / loraRank)
	for step := 1; step <= 2; step++ {
		phase := fmt.Sprintf("step%d", step)
		gotW, gotS := readBuffers(t, dir, phase, "dst", m.Dst), readBuffers(t, dir, phase, "scale", m.Scale)
		adapters := readBuffers(t, dir, phase, "adapter", ad.Dst)
		// want: the base, with every adapted weight part and its scales
		// replaced by the dense reference
		wantW, wantS := map[string][]byte{}, map[string][]byte{}
		for k, v := range baseW {
			wantW[k] = append([]byte(nil), v...)
		}
		for k, v := range baseS {
			wantS[k] = append([]byte(nil), v...)
		}
		adapted, changed := 0, 0
		for _, b := range m.Dst {
			for _, p := range b.Parts {
				module := strings.TrimSuffix(p.Tensor, ".weight")
				ab, okA := adapterPart[module+".lora_A.weight"]
				bb, okB := adapterPart[module+".lora_B.weight"]
				if !okA || !okB {
					continue
				}
				if b.DType != "fp8e4m3" {
					t.Fatalf("adapted weight %s is %s on the generator, not fp8e4m3", p.Tensor, b.DType)
				}
				sc, ok := scaleOf[p.Tensor]
				if !ok {
					t.Fatalf("FP8 weight %s has no scale tensor", p.Tensor)
				}
				pa, pb := ab.Parts[0], bb.Parts[0]
				if len(p.Shape) != 2 || !whole(pa) || !whole(pb) || pa.Shape[0] != loraRank || pa.Shape[1] != p.Shape[1] || pb.Shape[0] != p.Shape[0] || pb.Shape[1] != loraRank {
					t.Fatalf("%s %v: A part %v of %v, B part %v of %v: want the whole [%d, in] and [out, %d] on the tp=1 generator",
						p.Tensor, p.Shape, pa.LocalShape, pa.Shape, pb.LocalShape, pb.Shape, loraRank, loraRank)
				}
				A := func(k, c int64) float32 { return bf16At(adapters[ab.Name], elemAt(pa, k*p.Shape[1]+c)) }
				B := func(r, k int64) float32 { return bf16At(adapters[bb.Name], elemAt(pb, r*loraRank+k)) }
				g, err := fp8.NewGrid(p.LayoutShape, mode)
				if err != nil {
					t.Fatal(err)
				}
				br, bc := g.BlockShape()
				nd := len(p.LayoutShape)
				block := make([]int64, nd)
				blockOf := func(idx []int64) int64 { // the element's scale in sc's buffer
					for d := range nd {
						block[d] = idx[d]
					}
					block[nd-2], block[nd-1] = idx[nd-2]/br, idx[nd-1]/bc
					for d := range nd {
						block[d] -= sc.Offset[d]
						if block[d] < 0 || block[d] >= sc.Shape[d] {
							t.Fatalf("%s: element %v's block is outside the rank's scales (offset %v, shape %v)", p.Tensor, idx, sc.Offset, sc.Shape)
						}
					}
					return rowMajor(block, sc.Shape)
				}
				scale0 := func(i int64) float32 { return math.Float32frombits(binary.LittleEndian.Uint32(baseS[sc.Name][4*i:])) }
				var acc []float32
				amax := make([]float32, len(baseS[sc.Name])/4)
				eachElem(p, func(idx []int64, pos int64) {
					f := rowMajor(idx, p.LayoutShape)
					r, c := f/p.Shape[1], f%p.Shape[1]
					x := fp8.Decode(baseW[b.Name][pos]) * scale0(blockOf(idx))
					for k := range int64(loraRank) {
						x += float32(float32(s*B(r, k)) * A(k, c))
					}
					acc = append(acc, x)
					bi := blockOf(idx)
					amax[bi] = max(amax[bi], float32(math.Abs(float64(x))))
				})
				e := 0
				eachElem(p, func(idx []int64, pos int64) {
					wantW[b.Name][pos] = fp8.QuantizeValue(acc[e], fp8.ScaleOf(amax[blockOf(idx)]))
					if wantW[b.Name][pos] != baseW[b.Name][pos] {
						changed++
					}
					e++
				})
				for i, a := range amax {
					binary.LittleEndian.PutUint32(wantS[sc.Name][4*i:], math.Float32bits(fp8.ScaleOf(a)))
				}
				adapted++
			}
		}
		if want := len(ad.Dst) / 2; adapted != want || adapted == 0 {
			t.Fatalf("%s: %d adapted weight parts, want %d (one per A and B)", phase, adapted, want)
		}
		if changed == 0 {
			t.Fatalf("%s: the reference merge changes no FP8 byte of the base: the test would not see a merge that did nothing", phase)
		}
		for _, b := range m.Dst {
			compareBytes(t, phase, "buffer "+b.Name, gotW[b.Name], wantW[b.Name], 1)
		}
		for _, sc := range m.Scale {
			compareBytes(t, phase, "scales "+sc.Name, gotS[sc.Name], wantS[sc.Name], 4)
		}
		t.Logf("%s: %d adapted FP8 weights, %d of their bytes differ from the base; every byte and scale as the reference", phase, adapted, changed)
	}
}

// compareBytes reports how many elements (of size bytes) of got differ
// from want, and the first.
func compareBytes(t *testing.T, phase, what string, got, want []byte, size int) {
	t.Helper()
	bad, first := 0, -1
	for i := 0; i+size <= len(want); i += size {
		if string(got[i:i+size]) != string(want[i:i+size]) {
			if first < 0 {
				first = i / size
			}
			bad++
		}
	}
	if bad > 0 {
		f := first * size
		t.Errorf("%s: %s: %d of %d elements differ from the reference; first %d: %x, want %x", phase, what, bad, len(want)/size, first, got[f:f+size], want[f:f+size])
	}
}
