package sim

import (
	"strings"
	"testing"

	"github.com/m2n-dev/m2n/reshard"
)

// TestClusterMsgRateBinds: rank 0 sends 100 messages of 1 KB to ranks 1..100
// in one round over a NIC that issues 1 M messages/s, one at a time (burst
// 1). The bytes take 2 us in all at 50 GB/s; the rate spaces the starts 1
// us apart, so the last starts at 99 us and the run ends just after it. The
// critical path says the message rate of rank 0's NIC bound it.
func TestClusterMsgRateBinds(t *testing.T) {
	const n = 100
	b := handBuilder(t, n+1, apart, 1<<40)
	for d := 1; d <= n; d++ {
		b.Add(msg(0, d, 1000, false), 0)
	}
	s := b.Schedule()
	free := runHand(t, s, testCluster, apart)
	c := testCluster
	c.MsgRate, c.MsgBurst = 1e6, 1
	res := runHand(t, s, c, apart)
	// the last message starts at 99 us and, alone on the links by then, moves 1 KB at 50 GB/s
	near(t, "100 messages at 1 M/s", res.Seconds, 99e-6+1000/50e9)
	if free.Seconds > 3e-6 {
		t.Errorf("without a rate the round takes %g s, want about 2 us", free.Seconds)
	}
	u := res.Network
	if u.RateDelayed != n-1 || u.MostMessagesLink != "nic-out r0" || u.MostMessages != n {
		t.Errorf("network use %+v: want %d messages held back, nic-out r0 the most with %d", u, n-1, n)
	}
	if !strings.Contains(res.Critical.Binding, "message rate") || !strings.HasPrefix(res.Critical.Binding, "nic-out r0") {
		t.Errorf("binding %q, want nic-out r0's message rate", res.Critical.Binding)
	}
	var share float64
	for _, sh := range res.Critical.Shares {
		if sh.Kind == "message rate" {
			share = sh.Seconds
		}
	}
	near(t, "the path's message-rate share", share, 99e-6)
	if txt := u.text(); !strings.Contains(txt, "binding: 99 messages held back") {
		t.Errorf("text %q", txt)
	}
	// a burst of the whole round passes at once: as if there were no rate
	c.MsgBurst = n
	if got := runHand(t, s, c, apart); got.Seconds != free.Seconds || got.Network.RateDelayed != 0 {
		t.Errorf("burst %d: %g s (%d held back), want %g s as without a rate", n, got.Seconds, got.Network.RateDelayed, free.Seconds)
	}
}

// TestClusterMsgRateNotBinding: the presets' rate (50 M/s, burst 1024) on
// large messages changes nothing, bit for bit, and the result says so.
func TestClusterMsgRateNotBinding(t *testing.T) {
	b := handBuilder(t, 9, apart, 64<<20)
	for r := 0; r < 4; r++ {
		for d := 4; d < 9; d++ {
			b.Add(msg(r, d, 48<<20, false), r)
		}
	}
	s := b.Schedule()
	c := testCluster
	c.NetLatency = 5e-6
	free := runHand(t, s, c, apart)
	c.MsgRate, c.MsgBurst = DefaultMsgRate, DefaultMsgBurst
	res := runHand(t, s, c, apart)
	if res.Seconds != free.Seconds || res.Critical.Binding != free.Critical.Binding {
		t.Errorf("with the default rate %g s bound by %s; without %g s bound by %s", res.Seconds, res.Critical.Binding, free.Seconds, free.Critical.Binding)
	}
	if u := res.Network; u.RateDelayed != 0 || u.MsgRateUse <= 0 || u.MsgRateUse > 1e-3 {
		t.Errorf("network use %+v: want nothing held back and a small share of the rate", u)
	}
	if txt := res.Network.text(); !strings.Contains(txt, "not binding") {
		t.Errorf("text %q", txt)
	}
	for _, p := range Presets {
		if p.MsgRate != DefaultMsgRate || p.MsgBurst != DefaultMsgBurst || p.Topology != "" {
			t.Errorf("preset %s: rate %g burst %d topology %q, want the defaults on a fat tree", p.Name, p.MsgRate, p.MsgBurst, p.Topology)
		}
	}
}

// TestClusterRailVsFatTree: two hosts of 4 GPUs send to two others; ranks 0
// and 1 (rails 0 and 1 of host A) each send 1 GB to rail 1 of a different
// host (ranks 9 and 13). On a fat tree each uses its own NIC: 20 ms. On a
// rail-optimised network rank 0's message crosses rails, so it leaves
// through rank 1's NIC (the GPU of its host on rail 1), which both share:
// 40 ms, bound by nic-out r1. A same-rail pattern is the same on both.
func TestClusterRailVsFatTree(t *testing.T) {
	dom := make([]int, 16)
	for r := range dom {
		dom[r] = r / 4
	}
	topo := reshard.Topology{Domain: dom}
	build := func(pairs [][2]int) *reshard.Schedule {
		b := handBuilder(t, 16, topo, 1<<40)
		for _, p := range pairs {
			b.Add(msg(p[0], p[1], 1e9, false), 0)
		}
		return b.Schedule()
	}
	c := testCluster
	c.DomainGPUs = 4
	cross := build([][2]int{{0, 9}, {1, 13}})
	fat := runHand(t, cross, c, topo)
	near(t, "cross-rail on a fat tree", fat.Seconds, 1e9/50e9)
	if fat.Network.Topology != TopoFatTree || fat.Network.Relayed != 0 {
		t.Errorf("fat tree network use %+v", fat.Network)
	}
	rail := c
	if err := rail.Set("topology", "rail"); err != nil {
		t.Fatal(err)
	}
	if err := rail.Set("rails", "4"); err != nil {
		t.Fatal(err)
	}
	got := runHand(t, cross, rail, topo)
	near(t, "cross-rail on rails", got.Seconds, 2e9/50e9)
	if got.Critical.Binding != "nic-out r1" || got.Network.Relayed != 1 || got.Network.Topology != TopoRail {
		t.Errorf("rails: binding %q, network use %+v; want nic-out r1 and one relayed message", got.Critical.Binding, got.Network)
	}
	if txt := got.Network.text(); !strings.Contains(txt, "1 cross-rail messages relayed") {
		t.Errorf("text %q", txt)
	}
	same := build([][2]int{{0, 8}, {1, 13}})
	a, b := runHand(t, same, c, topo), runHand(t, same, rail, topo)
	if a.Seconds != b.Seconds || b.Network.Relayed != 0 {
		t.Errorf("same-rail pattern: fat tree %g s, rails %g s (%d relayed), want equal", a.Seconds, b.Seconds, b.Network.Relayed)
	}
	// the relay's NVLink hop adds the local latency
	rail.NetLatency, rail.LocalLatency = 5e-6, 2e-6
	one := build([][2]int{{0, 9}})
	near(t, "one relayed message", runHand(t, one, rail, topo).Seconds, 7e-6+1e9/50e9)
}

// TestClusterSetNetworkKeys: msg-rate, msg-burst, topology and rails parse
// as ParseCluster's keys, print in the cluster's description, and name the
// key in errors.
func TestClusterSetNetworkKeys(t *testing.T) {
	c, err := ParseCluster("hgx-h200:msg-rate=20M/s,msg-burst=64,topology=rail,rails=8")
	if err != nil {
		t.Fatal(err)
	}
	if c.MsgRate != 20e6 || c.MsgBurst != 64 || c.Topology != TopoRail || c.Rails != 8 {
		t.Errorf("parsed %+v", c)
	}
	if s := c.String(); !strings.Contains(s, "20M messages/s per NIC (burst 64)") || !strings.Contains(s, "rail-optimised network (8 rails") {
		t.Errorf("String() = %q", s)
	}
	for _, v := range []string{"0", "off"} {
		if err := c.Set("msg-rate", v); err != nil || c.MsgRate != 0 {
			t.Errorf("msg-rate=%s: %v, rate %g", v, err, c.MsgRate)
		}
	}
	for _, kv := range [][2]string{{"msg-rate", "fast"}, {"msg-rate", "-1"}, {"topology", "torus"}, {"rails", "0"}, {"msg-burst", "x"}} {
		if err := c.Set(kv[0], kv[1]); err == nil || !strings.Contains(err.Error(), kv[0]+"="+kv[1]) {
			t.Errorf("Set(%s, %s) = %v, want an error naming it", kv[0], kv[1], err)
		}
	}
	if x, err := parseMsgRate("5e7"); err != nil || x != 5e7 {
		t.Errorf("5e7: %g, %v", x, err)
	}
}

// TestClusterDomainSizes: the presets are NVL72 (gb200-nvl72) and NVL8
// (hgx-h200); a placement fills a domain up to its size and no further.
func TestClusterDomainSizes(t *testing.T) {
	for name, g := range map[string]int{"gb200-nvl72": 72, "hgx-h200": 8} {
		c, _ := Preset(name)
		if c.DomainGPUs != g {
			t.Errorf("%s: %d GPUs per domain, want %d", name, c.DomainGPUs, g)
		}
		full := make([]int, 2*g)
		for r := range full {
			full[r] = r / g
		}
		if _, err := placeRanks(c, reshard.Topology{Domain: full}, 2*g); err != nil {
			t.Errorf("%s: two full domains: %v", name, err)
		}
		over := make([]int, g+1)
		if _, err := placeRanks(c, reshard.Topology{Domain: over}, g+1); err == nil || !strings.Contains(err.Error(), "holds") {
			t.Errorf("%s: %d ranks in one domain: %v, want an error", name, g+1, err)
		}
	}
}
