package model

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"
)

// TestHugeLayerCounts: a config's layer count costs nothing until layers
// are built: 2^53 layers cut to 2 with Layers load at once (issue 23.4),
// and 10^9 layers without a cut are refused by their size before a single
// tensor is built, in little time and memory (issue 23.6).
func TestHugeLayerCounts(t *testing.T) {
	for _, tc := range []struct {
		layers int64
		keep   int
		want   string // "" loads
	}{
		{1 << 53, 2, ""},
		{1e9, 0, "1000000000 layers make 11000000003 tensors"},
		{1 << 53, 0, "9007199254740992 layers: the model's element or byte count overflows int64"},
	} {
		data := []byte(fmt.Sprintf(`{"model_type":"qwen3_moe","vocab_size":64,"hidden_size":16,"intermediate_size":32,"moe_intermediate_size":8,
			"num_hidden_layers":%d,"num_attention_heads":4,"num_key_value_heads":2,"head_dim":4,"num_experts":4,"mlp_only_layers":[0, 7, 100000]}`, tc.layers))
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		start := time.Now()
		c, err := parseConfig(data)
		if err != nil {
			t.Fatalf("%d layers: %v", tc.layers, err)
		}
		m, err := FromConfig("huge", c, LoadOptions{Layers: tc.keep})
		el := time.Since(start)
		runtime.ReadMemStats(&after)
		if el > 2*time.Second || after.TotalAlloc-before.TotalAlloc > 64<<20 {
			t.Errorf("%d layers (keep %d): %v and %d bytes allocated", tc.layers, tc.keep, el, after.TotalAlloc-before.TotalAlloc)
		}
		switch {
		case tc.want == "" && (err != nil || m.Layers != tc.keep):
			t.Errorf("%d layers cut to %d: %v", tc.layers, tc.keep, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%d layers: %v, want %q", tc.layers, err, tc.want)
		}
	}
	// sizes that overflow are errors, not wrapped numbers
	c, err := parseConfig([]byte(`{"model_type":"llama","vocab_size":4503599627370496,"hidden_size":1048576,"intermediate_size":4,"num_hidden_layers":1,"num_attention_heads":1}`))
	if err == nil {
		_, err = FromConfig("big", c, LoadOptions{})
	}
	if err == nil || !strings.Contains(err.Error(), "overflows int64") {
		t.Errorf("a vocabulary of 2^52 rows of 2^20: %v", err)
	}
	c, _ = parseConfig([]byte(`{"model_type":"qwen3_moe","num_hidden_layers":8,"mlp_only_layers":[0,3,3,9]}`))
	if got := c.moeLayers(8); got != 6 {
		t.Errorf("qwen3_moe MoE layers of 8 with mlp_only_layers [0 3 3 9]: %d, want 6", got)
	}
	n := 0
	for l := 0; l < 8; l++ {
		if c.moeLayer(l) {
			n++
		}
	}
	if n != c.moeLayers(8) {
		t.Errorf("moeLayers %d, moeLayer counts %d", c.moeLayers(8), n)
	}
}

// BenchmarkModelSetup lays out llama-shaped models of 100 to 100,000
// tensors (FromConfig, then New onto tp=2, pp=2 -> tp=4): the cost per
// tensor stays flat (ns/tensor), the set-up linear in the tensors.
func BenchmarkModelSetup(b *testing.B) {
	for _, tensors := range []int{100, 1000, 10000, 100000} {
		layers := (tensors - 3) / 9 // 9 tensors a layer, 3 outside
		layers -= layers % 2
		b.Run(fmt.Sprintf("tensors=%d", 9*layers+3), func(b *testing.B) {
			c := Config{ModelType: "llama", VocabSize: 256, HiddenSize: 16, IntermediateSize: 32, Layers: layers, Heads: 4, KVHeads: 2, HeadDim: 4}
			c.DType = 1
			tr, _ := ParseTrainer("tp=2,pp=2")
			g, _ := ParseGenerator("tp=4")
			b.ReportAllocs()
			var n int
			for i := 0; i < b.N; i++ {
				m, err := FromConfig("bench", c, LoadOptions{})
				if err != nil {
					b.Fatal(err)
				}
				if _, err := New(m, tr, g); err != nil {
					b.Fatal(err)
				}
				n = len(m.Tensors)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/tensor")
		})
	}
}
