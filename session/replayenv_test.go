package session

import (
	"strings"
	"testing"
)

// TestReadReplayEnv: Join reads the GPU replay's variables once, and
// refuses an M2N_FUSE_STREAMS out of 1 to 8 (or not a number) naming it,
// as it refuses an M2N_MEMCPY_MIN that is not a number.
func TestReadReplayEnv(t *testing.T) {
	t.Setenv("M2N_MEMCPY_MIN", "4096")
	t.Setenv("M2N_FUSE_STREAMS", "4")
	e, err := readReplayEnv()
	if err != nil || e != (replayEnv{memcpyMin: 4096, fuseStreams: 4}) {
		t.Fatalf("readReplayEnv() = %+v, %v, want memcpyMin 4096, fuseStreams 4", e, err)
	}
	t.Setenv("M2N_FUSE_STREAMS", "")
	if e, err := readReplayEnv(); err != nil || e.fuseStreams != 0 {
		t.Fatalf("unset M2N_FUSE_STREAMS: %+v, %v, want 0 (the replay's default)", e, err)
	}
	for _, v := range []string{"0", "9", "many"} {
		t.Setenv("M2N_FUSE_STREAMS", v)
		if _, err := readReplayEnv(); err == nil || !strings.Contains(err.Error(), "M2N_FUSE_STREAMS") || !strings.Contains(err.Error(), "1 to 8") {
			t.Errorf("M2N_FUSE_STREAMS=%s: %v, want it refused naming the variable and 1 to 8", v, err)
		}
	}
	t.Setenv("M2N_FUSE_STREAMS", "")
	t.Setenv("M2N_MEMCPY_MIN", "lots")
	if _, err := readReplayEnv(); err == nil || !strings.Contains(err.Error(), "M2N_MEMCPY_MIN") {
		t.Errorf("M2N_MEMCPY_MIN=lots: %v, want it refused naming the variable", err)
	}
}
