package mpi

import (
	"slices"
	"testing"
)

func TestForChunks(t *testing.T) {
	cases := []struct {
		name         string
		total, chunk int
		want         [][2]int // (off, n) pieces
	}{
		{"empty is one empty piece", 0, 4, [][2]int{{0, 0}}},
		{"shorter than a chunk", 3, 4, [][2]int{{0, 3}}},
		{"exactly one chunk", 4, 4, [][2]int{{0, 4}}},
		{"chunk and a remainder", 5, 4, [][2]int{{0, 4}, {4, 1}}},
		{"exact multiple", 12, 4, [][2]int{{0, 4}, {4, 4}, {8, 4}}},
		{"chunk of one byte", 3, 1, [][2]int{{0, 1}, {1, 1}, {2, 1}}},
		{"above 2^31 with the default chunk", 1<<31 + 12345, 1 << 30, [][2]int{{0, 1 << 30}, {1 << 30, 1 << 30}, {1 << 31, 12345}}},
	}
	for _, tc := range cases {
		restore := SetChunkBytes(tc.chunk)
		var got [][2]int
		forChunks(tc.total, func(off, n int) error {
			got = append(got, [2]int{off, n})
			return nil
		})
		if !slices.Equal(got, tc.want) {
			t.Errorf("%s: pieces %v, want %v", tc.name, got, tc.want)
		}
		if n := numChunks(tc.total); n != len(tc.want) {
			t.Errorf("%s: numChunks = %d, want %d", tc.name, n, len(tc.want))
		}
		restore()
	}
}

func TestNames(t *testing.T) {
	cases := []struct{ got, want string }{
		{ThreadMultiple.String(), "MPI_THREAD_MULTIPLE"},
		{threadFunneled.String(), "MPI_THREAD_FUNNELED"},
		{ThreadLevel(9).String(), "ThreadLevel(9)"},
		{(&Error{Op: "MPI_Isend", Code: 6, Msg: "MPI_ERR_RANK: invalid rank"}).Error(), "mpi: MPI_Isend: MPI_ERR_RANK: invalid rank"},
	}
	for _, tc := range cases {
		if tc.got != tc.want {
			t.Errorf("got %q, want %q", tc.got, tc.want)
		}
	}
}
