package faults

import (
	"strings"
	"testing"
)

func TestAt(t *testing.T) {
	for _, c := range []struct {
		v        string
		rank, n  int
		ok, fail bool
	}{{"", 0, 0, false, false}, {"3", 3, 0, true, false}, {"3", 2, 0, false, false}, {"2:37", 2, 37, true, false},
		{"2:-1", 2, 0, false, true}, {"x", 0, 0, false, true}, {"-1", 0, 0, false, true}} {
		t.Setenv("M2N_FAULT_CORRUPT", c.v)
		n, ok, err := At("M2N_FAULT_CORRUPT", c.rank)
		if (err != nil) != c.fail || ok != c.ok || (ok && n != c.n) {
			t.Errorf("%q at rank %d: %d, %v, %v", c.v, c.rank, n, ok, err)
		}
		if err != nil && !strings.Contains(err.Error(), `M2N_FAULT_CORRUPT "`+c.v+`"`) {
			t.Errorf("%v does not name the variable and value", err)
		}
	}
}

func TestPointAndTransport(t *testing.T) {
	t.Setenv(StopVar, "2:step")
	if r, w, ok, err := Point(StopVar); r != 2 || w != "step" || !ok || err != nil {
		t.Errorf("Point: %d %s %v %v", r, w, ok, err)
	}
	if _, ok, err := Transport(1); ok || err != nil {
		t.Errorf("rank 1 gets a faulty transport: %v %v", ok, err)
	}
	if wrap, ok, err := Transport(2); !ok || err != nil || wrap == nil {
		t.Errorf("rank 2 gets none: %v %v", ok, err)
	}
	t.Setenv(StopVar, "2:nowhere")
	if _, _, err := Transport(2); err == nil || !strings.Contains(err.Error(), "a point among join, prepare, step") {
		t.Errorf("bad point: %v", err)
	}
	t.Setenv(StopVar, "")
	t.Setenv("M2N_FAULT_WIRE", "1")
	if _, ok, _ := Transport(1); !ok {
		t.Errorf("the wire fault is not applied")
	}
}
