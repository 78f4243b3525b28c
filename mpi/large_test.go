package mpi_test

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/m2n-dev/m2n/internal/testutil/mpitest"
	"github.com/m2n-dev/m2n/mpi"
)

// large is a byte count above 2^31 and not a multiple of the 1 GiB chunk
// limit or of 8.
const large = 1<<31 + 12345

// TestLargeBuffers moves buffers of more than 2^31 bytes with the default
// chunk limit: Isend/Irecv and Bcast. It needs about 4.5 GiB of memory over both ranks and
// takes 5 to 15 seconds; -short skips it.
func TestLargeBuffers(t *testing.T) {
	if testing.Short() {
		t.Skip("moves buffers of over 2 GiB; run without -short")
	}
	const need = 6 << 30
	if avail, err := memAvailable(); err == nil && avail < need {
		t.Skipf("needs %d GiB of available memory, the machine has %d MiB", need>>30, avail>>20)
	}
	mpitest.Run(t, 2, func(t mpitest.T, c *mpi.Comm) {
		rank := c.Rank()
		step := func(name string, start time.Time) {
			t.Logf("%s: %.2f s", name, time.Since(start).Seconds())
		}
		// One buffer per rank for every step: first touches of fresh
		// memory are the slowest part on some virtual machines.
		buf := make([]byte, large+1000)
		msg := buf[:large]

		start := time.Now()
		if rank == 0 {
			fillLarge(msg, 1)
			r, err := c.Isend(msg, 1, 7)
			if err != nil {
				t.Fatal(err)
			}
			if got := mpi.Parts(r); got != 3 {
				t.Errorf("Isend of %d bytes: %d parts, want 3", large, got)
			}
			if err := r.Wait(); err != nil {
				t.Fatal(err)
			}
		} else {
			r, err := c.Irecv(msg, 0, 7)
			if err != nil {
				t.Fatal(err)
			}
			if err := mpi.Waitall([]*mpi.Request{r}); err != nil {
				t.Fatal(err)
			}
			if d := checkLarge(msg, 1); d != "" {
				t.Errorf("Irecv: %s", d)
			}
		}
		step("Isend/Irecv", start)

		start = time.Now()
		if rank == 1 {
			fillLarge(msg, 2)
		}
		if err := c.Bcast(msg, 1); err != nil {
			t.Fatal(err)
		}
		if d := checkLarge(msg, 2); d != "" {
			t.Errorf("Bcast: %s", d)
		}
		step("Bcast", start)
	})
}

// fillLarge writes seed<<48 ^ i into the i-th 8-byte word of b, so that
// every word tells where it belongs, and seed+i into the tail bytes.
func fillLarge(b []byte, seed uint64) {
	words := len(b) / 8
	for i := range words {
		binary.LittleEndian.PutUint64(b[8*i:], seed<<48^uint64(i))
	}
	for i := 8 * words; i < len(b); i++ {
		b[i] = byte(seed) + byte(i)
	}
}

// checkLarge describes the first byte of b that fillLarge(b, seed) would
// not have written, or returns "".
func checkLarge(b []byte, seed uint64) string {
	words := len(b) / 8
	for i := range words {
		if got, want := binary.LittleEndian.Uint64(b[8*i:]), seed<<48^uint64(i); got != want {
			return fmt.Sprintf("word at byte %d is %#x, want %#x", 8*i, got, want)
		}
	}
	for i := 8 * words; i < len(b); i++ {
		if want := byte(seed) + byte(i); b[i] != want {
			return fmt.Sprintf("byte %d is %d, want %d", i, b[i], want)
		}
	}
	return ""
}

// memAvailable reads MemAvailable from /proc/meminfo, in bytes.
func memAvailable() (int64, error) {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0, err
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if rest, ok := strings.CutPrefix(s.Text(), "MemAvailable:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			return kb << 10, err
		}
	}
	return 0, fmt.Errorf("no MemAvailable in /proc/meminfo")
}
