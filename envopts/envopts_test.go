package envopts

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func lookup(m map[string]string) Lookup {
	return func(key string) Source {
		if v, ok := m[key]; ok {
			return Source{v, "--" + key}
		}
		return Env(key)
	}
}

func TestResolve(t *testing.T) {
	t.Setenv("M2N_CHUNK_BYTES", "1MiB")
	t.Setenv("M2N_MPI_INPLACE", "0")
	s, err := Resolve(lookup(map[string]string{"timeout": "30s", "coalesce-bytes": "0", "emulate-net-bw": "400Gbps", "dst-domain-size": "4", "latency": "5us"}))
	if err != nil {
		t.Fatal(err)
	}
	o := s.Options
	if o.Timeout != 30*time.Second || o.ChunkBytes != 1<<20 || o.CoalesceBytes != -1 || o.EmulateNetBW != 5e10 || o.Domains.Dst != 4 || !o.NoInPlace {
		t.Errorf("options %+v", o)
	}
	if s.Fabric.NetBW != 5e10 || s.Fabric.LocalBW != 900e9 || s.Fabric.Latency != 5e-6 || !s.MeasureLocal || s.FabricGiven {
		t.Errorf("fabric %+v, measure %v, given %v", s.Fabric, s.MeasureLocal, s.FabricGiven)
	}
	if s.Timeout.Name != "--timeout" || s.Emulate.Value != "400Gbps" {
		t.Errorf("sources %+v %+v", s.Timeout, s.Emulate)
	}
}

// TestResolveBlames: the first setting that cannot be used is named with
// where it came from and its value.
func TestResolveBlames(t *testing.T) {
	for _, c := range []struct{ env, value, name, want string }{
		{"M2N_TIMEOUT", "1ns", "M2N_TIMEOUT", "want at least 1ms"},
		{"M2N_TIMEOUT", "9999999h", "M2N_TIMEOUT", "want a duration from 1ms to 24h0m0s"},
		{"M2N_STAGING_BYTES", "0", "M2N_STAGING_BYTES", "want a positive size"},
		{"M2N_DST_DOMAIN_SIZE", "2 junk", "M2N_DST_DOMAIN_SIZE", "want a whole number"},
		{"M2N_EMULATE_NET_BW", "1e-300", "M2N_EMULATE_NET_BW", "want at least 1kB/s"},
		{"M2N_LOCAL_BW", "fast", "M2N_LOCAL_BW", "want a rate"},
		{"M2N_BALANCE", "even", "M2N_BALANCE", "even"},
		{"M2N_PACK_BATCH", "garbage", "M2N_PACK_BATCH", "want a whole number from 1 to 8"},
		{"M2N_MEMCPY_MIN", "lots", "M2N_MEMCPY_MIN", "want a whole number of bytes"},
		{"M2N_FUSED_MINB", "9", "M2N_FUSED_MINB", "want a whole number from 1 to 8"},
		{"M2N_FUSED_LANE_VECS", "16", "M2N_FUSED_LANE_VECS", "want a whole number from 1 to 8"},
		{"M2N_FUSE_STREAMS", "0", "M2N_FUSE_STREAMS", "want a whole number from 1 to 8"},
		{"M2N_FUSED_DIV", "newton", "M2N_FUSED_DIV", "want fma (the default), midpoint or bracket"},
		{"M2N_MPI_INPLACE", "banana", "M2N_MPI_INPLACE", "want 0"},
	} {
		t.Run(c.env, func(t *testing.T) {
			t.Setenv(c.env, c.value)
			_, err := Resolve(Env)
			var e *Error
			if !errors.As(err, &e) || e.Name != c.name || e.Value != c.value {
				t.Fatalf("%v", err)
			}
			if got := err.Error(); got[:len(c.name)] != c.name || !strings.Contains(got, c.want) {
				t.Errorf("%q, want %s ... %q", got, c.name, c.want)
			}
		})
	}
	if _, err := Resolve(lookup(map[string]string{"latency": "-1s"})); err == nil || err.Error() != `--latency "-1s": want a duration of at least 0, like 20us` {
		t.Errorf("latency: %v", err)
	}
}
