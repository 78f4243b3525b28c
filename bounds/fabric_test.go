package bounds

import (
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/m2n-dev/m2n/reshard"
)

// TestFabricValidate is issue 17 case 9's --latency -1s: the model accepted
// negative latencies and predicted negative times. Auto now refuses such a
// fabric, naming the field and the value.
func TestFabricValidate(t *testing.T) {
	good := Fabric{NetBW: 50e9, LocalBW: 900e9}
	if err := good.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		f    Fabric
		want string
	}{
		{Fabric{NetBW: 50e9, LocalBW: 900e9, Latency: -1}, "latency -1 s, want a non-negative, finite time"},
		{Fabric{NetBW: 50e9, LocalBW: 900e9, Latency: math.NaN()}, "latency NaN s"},
		{Fabric{NetBW: 50e9, LocalBW: 900e9, Latency: math.Inf(1)}, "latency +Inf s"},
		{Fabric{NetBW: 0, LocalBW: 900e9}, "network bandwidth 0 bytes/s, want a positive, finite rate"},
		{Fabric{NetBW: -5, LocalBW: 900e9}, "network bandwidth -5 bytes/s"},
		{Fabric{NetBW: 50e9, LocalBW: math.Inf(1)}, "local bandwidth +Inf bytes/s"},
		{Fabric{NetBW: 50e9, LocalBW: math.NaN()}, "local bandwidth NaN bytes/s"},
	} {
		err := tc.f.Validate()
		var fe *reshard.FieldError
		if !errors.As(err, &fe) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: Validate() = %v, want %q", tc.f, err, tc.want)
		}
	}
	src := layoutOn(t, []int64{8, 4}, []int{2}, []int{0, 1}, "S0")
	dst := layoutOn(t, []int64{8, 4}, []int{2}, []int{2, 3}, "S1")
	p, err := reshard.NewPlan(src, dst, 4, reshard.Options{})
	if err != nil {
		t.Fatal(err)
	}
	opts := reshard.DefaultScheduleOptions
	if _, err := (Auto{Fabric: Fabric{NetBW: 50e9, LocalBW: 900e9, Latency: -1}}).Schedule([]*reshard.Plan{p}, reshard.Topology{}, opts); err == nil ||
		!strings.Contains(err.Error(), "latency -1 s") {
		t.Errorf("Auto with a negative latency: %v", err)
	}
	if _, err := (Auto{Fabric: good}).Schedule([]*reshard.Plan{p}, reshard.Topology{Domain: []int{0}}, opts); err == nil || !strings.Contains(err.Error(), "topology") {
		t.Errorf("Auto with a short topology: %v", err)
	}
	s, err := (Auto{Fabric: good}).Schedule([]*reshard.Plan{p}, reshard.Topology{}, opts)
	if err != nil || s == nil {
		t.Fatal(err)
	}
	c := (Auto{Fabric: good}).Choose([]*reshard.Plan{p}, reshard.Topology{}, opts)
	for _, b := range c.Bounds {
		if !(b.Predicted >= 0) {
			t.Errorf("%s predicts %g s", b.Route, b.Predicted)
		}
	}
	if _, err := Uniform(math.NaN(), 16, 8, 8, 1, 0); err == nil {
		t.Error("Uniform accepted NaN bytes")
	}
	if _, err := Uniform(1e9, 16, 8, 8, 1, math.Inf(1)); err == nil {
		t.Error("Uniform accepted an infinite chunk")
	}
	if err := (Problem{Bytes: -1}).Validate(); err == nil {
		t.Error("negative bytes accepted")
	}
}
