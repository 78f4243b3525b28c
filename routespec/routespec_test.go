package routespec

import (
	"reflect"
	"strings"
	"testing"

	"github.com/m2n-dev/m2n/bounds"
	"github.com/m2n-dev/m2n/hier"
	"github.com/m2n-dev/m2n/reshard"
)

func TestParse(t *testing.T) {
	def := Options{Fabric: DefaultFabric()}
	for _, c := range []struct {
		spec string
		want reshard.Route
	}{
		{"flat", reshard.Flat},
		{" agbcast ", reshard.AllGatherBroadcast},
		{"hier", hier.Hier{}},
		{"hier:balance=bytes", hier.Hier{Balance: hier.BalanceBytes}},
		{"auto", bounds.Auto{Fabric: DefaultFabric()}},
		{"auto:net=400Gbps,local=450GB/s,latency=5us,buckets=256MiB,balance=bytes",
			bounds.Auto{Fabric: bounds.Fabric{NetBW: 5e10, LocalBW: 4.5e11, Latency: 5e-6}, Balance: hier.BalanceBytes, Buckets: 256 << 20}},
		{"auto:net_bw=25e9,local_bw=9e11,latency=2e-5", bounds.Auto{Fabric: bounds.Fabric{NetBW: 25e9, LocalBW: 9e11, Latency: 2e-5}}},
	} {
		got, err := Parse(c.spec, def)
		if err != nil || !reflect.DeepEqual(got, c.want) {
			t.Errorf("Parse(%q) = %#v, %v; want %#v", c.spec, got, err, c.want)
		}
	}
	for _, c := range []struct{ spec, want string }{
		{"fast", `unknown route "fast"`},
		{"", `unknown route ""`},
		{"flat:balance=bytes", "route flat takes no balance"},
		{"auto:net=-3GB/s", `route "auto:net=-3GB/s": net=-3GB/s: bandwidth "-3GB/s"`},
		{"hier:balance=even", "balance=even"},
		{"auto:speed", `"speed" is not key=value`},
		{"auto:color=red", "unknown key"},
	} {
		if _, err := Parse(c.spec, def); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Parse(%q): %v, want an error containing %q", c.spec, err, c.want)
		}
	}
}

func TestList(t *testing.T) {
	for _, c := range []struct {
		in       string
		converts bool
		want     []string
	}{
		{"all", false, []string{"flat", "agbcast", "hier"}},
		{"all", true, []string{"flat", "hier"}},
		{"all,auto", false, []string{"flat", "agbcast", "hier", "auto"}},
		{"hier, auto", false, []string{"hier", "auto"}},
	} {
		if got, err := List(c.in, c.converts); err != nil || !reflect.DeepEqual(got, c.want) {
			t.Errorf("List(%q, %v) = %v, %v; want %v", c.in, c.converts, got, err, c.want)
		}
	}
	if _, err := List("flat,fast", false); err == nil || !strings.Contains(err.Error(), `unknown route "fast"`) {
		t.Errorf("List: %v", err)
	}
}
