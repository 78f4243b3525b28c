package mpi_test

import (
	"errors"
	"testing"

	"github.com/m2n-dev/m2n/internal/testutil/mpitest"
	"github.com/m2n-dev/m2n/mpi"
)

func TestWorld(t *testing.T) {
	mpitest.Run(t, 3, func(t mpitest.T, c *mpi.Comm) {
		if c != mpi.World() {
			t.Errorf("body got %p, want World() %p", c, mpi.World())
		}
		if c.Size() != 3 {
			t.Errorf("Size() = %d, want 3", c.Size())
		}
		if r := c.Rank(); r < 0 || r >= 3 {
			t.Errorf("Rank() = %d, want in [0, 3)", r)
		}
		// Every rank number appears exactly once.
		all := make([]byte, 3)
		if err := c.Allgather([]byte{byte(c.Rank())}, all); err != nil {
			t.Fatal(err)
		}
		if d := diff(all, []byte{0, 1, 2}); d != "" {
			t.Errorf("gathered ranks: %s", d)
		}
		if !mpi.Initialized() || mpi.Finalized() {
			t.Errorf("Initialized() = %v, Finalized() = %v", mpi.Initialized(), mpi.Finalized())
		}
	})
}

// members gathers the world ranks of c's members in c's rank order.
func members(t mpitest.T, c *mpi.Comm) []byte {
	got := make([]byte, c.Size())
	if err := c.Allgather([]byte{byte(t.Rank())}, got); err != nil {
		t.Fatal(err)
	}
	return got
}

func TestSplit(t *testing.T) {
	const np = 4
	cases := []struct {
		name       string
		color, key func(rank int) int
		want       func(rank int) []byte // world ranks of the new comm; nil: no comm
	}{
		{
			name:  "halves",
			color: func(r int) int { return r / 2 },
			key:   func(r int) int { return r },
			want:  func(r int) []byte { return []byte{byte(r / 2 * 2), byte(r/2*2 + 1)} },
		},
		{
			name:  "one color, reversed keys",
			color: func(r int) int { return 7 },
			key:   func(r int) int { return -r },
			want:  func(r int) []byte { return []byte{3, 2, 1, 0} },
		},
		{
			name:  "equal keys keep world order",
			color: func(r int) int { return r % 2 },
			key:   func(r int) int { return 0 },
			want:  func(r int) []byte { return []byte{byte(r % 2), byte(r%2 + 2)} },
		},
		{
			name: "odd ranks undefined",
			color: func(r int) int {
				if r%2 == 1 {
					return mpi.Undefined
				}
				return 0
			},
			key: func(r int) int { return r },
			want: func(r int) []byte {
				if r%2 == 1 {
					return nil
				}
				return []byte{0, 2}
			},
		},
	}
	mpitest.Run(t, np, func(t mpitest.T, c *mpi.Comm) {
		for _, tc := range cases {
			r := c.Rank()
			sub, err := c.Split(tc.color(r), tc.key(r))
			if err != nil {
				t.Fatalf("%s: Split: %v", tc.name, err)
			}
			want := tc.want(r)
			if want == nil {
				if sub != nil {
					t.Errorf("%s: Split returned a communicator for color Undefined", tc.name)
				}
			} else if d := diff(members(t, sub), want); d != "" {
				t.Errorf("%s: members: %s", tc.name, d)
			}
			if err := sub.Free(); err != nil {
				t.Errorf("%s: Free: %v", tc.name, err)
			}
		}
	})
}

func TestSplitShared(t *testing.T) {
	cases := []struct {
		name string
		key  func(rank int) int
		want []byte
	}{
		{"rank order", func(r int) int { return r }, []byte{0, 1, 2}},
		{"reversed", func(r int) int { return -r }, []byte{2, 1, 0}},
	}
	mpitest.Run(t, 3, func(t mpitest.T, c *mpi.Comm) {
		for _, tc := range cases {
			// All ranks of a test job run on this host.
			node, err := c.SplitShared(tc.key(c.Rank()))
			if err != nil {
				t.Fatalf("%s: %v", tc.name, err)
			}
			if d := diff(members(t, node), tc.want); d != "" {
				t.Errorf("%s: members: %s", tc.name, d)
			}
			if err := node.Free(); err != nil {
				t.Errorf("%s: Free: %v", tc.name, err)
			}
		}
	})
}

func TestDupFree(t *testing.T) {
	mpitest.Run(t, 2, func(t mpitest.T, c *mpi.Comm) {
		d, err := c.Dup()
		if err != nil {
			t.Fatal(err)
		}
		if d.Size() != c.Size() || d.Rank() != c.Rank() {
			t.Errorf("Dup: rank %d of %d, want %d of %d", d.Rank(), d.Size(), c.Rank(), c.Size())
		}
		// Messages on the duplicate never match receives on the original.
		const tag = 5
		if c.Rank() == 0 {
			if err := d.Send([]byte("dup"), 1, tag); err != nil {
				t.Fatal(err)
			}
			if err := c.Send([]byte("wld"), 1, tag); err != nil {
				t.Fatal(err)
			}
		} else {
			got := make([]byte, 3)
			if err := c.Recv(got, mpi.AnySource, mpi.AnyTag); err != nil {
				t.Fatal(err)
			}
			if string(got) != "wld" {
				t.Errorf("world receive got %q, want \"wld\"", got)
			}
			if err := d.Recv(got, 0, tag); err != nil {
				t.Fatal(err)
			}
			if string(got) != "dup" {
				t.Errorf("dup receive got %q, want \"dup\"", got)
			}
		}
		if err := d.Free(); err != nil {
			t.Fatalf("Free: %v", err)
		}
		if err := d.Barrier(); !errors.Is(err, mpi.ErrInvalid) {
			t.Errorf("Barrier on a freed comm: %v, want ErrInvalid", err)
		}
		if err := d.Free(); !errors.Is(err, mpi.ErrInvalid) {
			t.Errorf("second Free: %v, want ErrInvalid", err)
		}
		if err := c.Free(); !errors.Is(err, mpi.ErrInvalid) {
			t.Errorf("Free(World()): %v, want ErrInvalid", err)
		}
		var none *mpi.Comm
		if err := none.Free(); err != nil {
			t.Errorf("Free on nil: %v, want nil", err)
		}
	})
}

// TestFromFortran wraps communicators by their Fortran handles, as a
// library loaded by mpi4py does: World's handle gives World, a
// duplicate's handle gives a borrowed Comm over the same group that works
// and that Free refuses, and a handle of no communicator is refused.
func TestFromFortran(t *testing.T) {
	mpitest.Run(t, 2, func(t mpitest.T, c *mpi.Comm) {
		f, err := mpi.World().Fortran()
		if err != nil {
			t.Fatal(err)
		}
		w, err := mpi.FromFortran(f)
		if err != nil || w != mpi.World() {
			t.Fatalf("FromFortran(World's handle %d) = %p, %v; want World", f, w, err)
		}
		dup, err := c.Dup()
		if err != nil {
			t.Fatal(err)
		}
		defer dup.Free()
		fd, err := dup.Fortran()
		if err != nil {
			t.Fatal(err)
		}
		b, err := mpi.FromFortran(fd)
		if err != nil {
			t.Fatal(err)
		}
		if !b.Borrowed() || b.Size() != 2 || b.Rank() != c.Rank() {
			t.Errorf("borrowed comm: Borrowed %v, rank %d of %d; want true, rank %d of 2", b.Borrowed(), b.Rank(), b.Size(), c.Rank())
		}
		all := make([]byte, 2)
		if err := b.Allgather([]byte{byte(c.Rank())}, all); err != nil {
			t.Fatal(err)
		}
		if d := diff(all, []byte{0, 1}); d != "" {
			t.Errorf("allgather on the borrowed comm: %s", d)
		}
		if err := b.Free(); !errors.Is(err, mpi.ErrInvalid) {
			t.Errorf("Free of a borrowed comm = %v, want ErrInvalid", err)
		}
		if _, err := mpi.FromFortran(1 << 20); !errors.Is(err, mpi.ErrInvalid) {
			t.Errorf("FromFortran(1<<20) = %v, want ErrInvalid", err)
		}
		if _, err := mpi.FromFortran(-1); !errors.Is(err, mpi.ErrInvalid) {
			t.Errorf("FromFortran(-1) = %v, want ErrInvalid", err)
		}
	})
}
