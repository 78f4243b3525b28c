package nccl

import (
	"errors"
	"testing"
)

func TestErrorIs(t *testing.T) {
	e := &Error{Op: "ncclGroupEnd", Code: 7, Msg: "operation in progress"}
	if !errors.Is(e, ErrInProgress) {
		t.Error("code 7 does not match ErrInProgress")
	}
	if errors.Is(&Error{Op: "x", Code: 2}, ErrInProgress) {
		t.Error("code 2 matches ErrInProgress")
	}
	if got, want := e.Error(), "nccl: ncclGroupEnd: operation in progress"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
}

func TestInitRankChecksRanks(t *testing.T) {
	if err := Load(); err != nil {
		t.Skip(err)
	}
	for _, c := range [][2]int{{0, 0}, {2, 2}, {2, -1}} {
		if _, err := InitRank(c[0], UniqueID{}, c[1], nil); err == nil {
			t.Errorf("InitRank(%d, rank %d) accepted", c[0], c[1])
		}
	}
}
