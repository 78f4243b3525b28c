package sim

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/m2n-dev/m2n/reshard"
	"github.com/m2n-dev/m2n/units"
)

// Cluster is the hardware a simulation runs on: domains of DomainGPUs GPUs
// joined by a local fabric (NVLink), each GPU with a share of a NIC into a
// network between domains. Bandwidths are bytes per second in each
// direction; latencies are seconds per message.
//
// The network between NICs is modelled as non-blocking (full bisection,
// no congestion inside the switches), and so is the local fabric between a
// domain's GPUs (an NVSwitch): a flow is limited only by its sender's out
// link and its receiver's in link, which it shares max-min fairly with the
// other flows on them.
type Cluster struct {
	// Name is the preset's name, or "custom".
	Name string `json:"name"`
	// DomainGPUs is G, the GPUs of one local-fabric domain.
	DomainGPUs int `json:"domain_gpus"`
	// NetBW is a NIC's bandwidth each way; GPUsPerNIC GPUs of a domain
	// (consecutive in rank order) share one NIC.
	NetBW      float64 `json:"net_bw"`
	GPUsPerNIC int     `json:"gpus_per_nic"`
	// NetLatency is the per-message latency of a network message.
	NetLatency float64 `json:"net_latency_s"`
	// LocalBW is a GPU's local-fabric bandwidth each way.
	LocalBW float64 `json:"local_bw"`
	// LocalLatency is the per-message latency of a local message.
	LocalLatency float64 `json:"local_latency_s"`
	// CopyBW is the rate at which a rank copies inside its own memory:
	// local copies (Src == Dst) and, for messages whose regions are not one
	// contiguous run, the pack before the send and the unpack after the
	// receive. Zero makes copies free.
	CopyBW float64 `json:"copy_bw"`
	// MsgRate is the messages per second a NIC issues (out) and accepts
	// (in), each direction on its own, beside the per-message latency;
	// MsgBurst messages pass at once before the rate applies (a send
	// queue's depth; 0 counts as 1). Zero MsgRate: no limit. It is a
	// token bucket per NIC and direction: a network message starts at the
	// latest of its post plus latency and the times both of its NICs have
	// a token (docs/sim.md).
	MsgRate  float64 `json:"msg_rate,omitempty"`
	MsgBurst int     `json:"msg_burst,omitempty"`
	// Topology is the network between NICs: "" or "fattree" (non-blocking,
	// every NIC reaches every NIC directly), or "rail" (rail-optimised,
	// rail-only: NIC k of a domain sits on rail k mod Rails, and a message
	// between NICs of different rails is relayed over NVLink to the source
	// domain's NIC on the destination's rail, as NCCL's PXN does, and
	// leaves through that NIC).
	Topology string `json:"topology,omitempty"`
	// Rails is the rail count of a rail topology: the NICs of one host
	// (0: the domain's NICs, every one a rail of its own).
	Rails int `json:"rails,omitempty"`
}

// Topologies of Cluster.Topology.
const (
	TopoFatTree = "fattree"
	TopoRail    = "rail"
)

// rail reports whether the cluster's network is rail-optimised.
func (c Cluster) rail() bool { return c.Topology == TopoRail }

// Presets are the clusters --cluster names. Bandwidths are per GPU and
// direction; latencies and copy rates are assumptions stated in Notes.
var Presets = []Cluster{
	{Name: "gb200-nvl72", DomainGPUs: 72, NetBW: 50e9, GPUsPerNIC: 1, NetLatency: 5e-6, LocalBW: 900e9, LocalLatency: 2e-6, CopyBW: 3.2e12,
		MsgRate: DefaultMsgRate, MsgBurst: DefaultMsgBurst, Rails: 4},
	{Name: "hgx-h200", DomainGPUs: 8, NetBW: 50e9, GPUsPerNIC: 1, NetLatency: 5e-6, LocalBW: 450e9, LocalLatency: 2e-6, CopyBW: 1.9e12,
		MsgRate: DefaultMsgRate, MsgBurst: DefaultMsgBurst, Rails: 8},
}

// DefaultMsgRate and DefaultMsgBurst are the presets' NIC message rate and
// burst: an assumption, unmeasured. A ConnectX-7 is specified for a few
// hundred million small messages per second from many CPU cores; a GPU
// transport posts from one proxy thread per NIC, so the presets assume 50
// million per second, each direction, with a 1024-message send queue. At
// the presets' 64 MiB chunks and 1 MiB coalescing no published
// configuration comes near it (docs/sim.md).
const (
	DefaultMsgRate  = 50e6
	DefaultMsgBurst = 1024
)

// PresetNotes says where each preset's numbers come from, by name.
var PresetNotes = map[string]string{
	"gb200-nvl72": "72 GPUs per NVLink 5 domain, 900 GB/s each way per GPU; one 400 Gb/s ConnectX-7 (50 GB/s) per GPU; " +
		"latencies 5 us (network) and 2 us (NVLink) per message and 50 M messages/s per NIC (burst 1024) are assumptions; copy 3.2 TB/s is the H200's measured " +
		"pack rate scaled by HBM3e bandwidth (8 vs 4.8 TB/s), unmeasured",
	"hgx-h200": "8 GPUs per host on NVLink 4 (NVSwitch), 450 GB/s each way per GPU; one 400 Gb/s NIC (50 GB/s) per GPU; " +
		"latencies 5 us and 2 us and 50 M messages/s per NIC (burst 1024) are assumptions; copy 1.9 TB/s is refit pack-bench's pack rate on an H200",
}

// Preset returns the preset of that name.
func Preset(name string) (Cluster, bool) {
	for _, c := range Presets {
		if c.Name == name {
			return c, true
		}
	}
	return Cluster{}, false
}

// PresetNames lists the presets' names in order.
func PresetNames() []string {
	var out []string
	for _, c := range Presets {
		out = append(out, c.Name)
	}
	return out
}

// ParseCluster reads a cluster spec: a preset name ("gb200-nvl72"), a preset
// with overrides ("hgx-h200:net=25GB/s,copy=0"), or "custom:" with at least
// gpus, net and local ("custom:gpus=16,net=50GB/s,local=900GB/s"). Keys:
// gpus, net, local, net-latency, local-latency, copy, gpus-per-nic,
// msg-rate, msg-burst, topology, rails (Set); rates
// like 50GB/s (decimal), 40GiB/s or 400Gbps (bits: package units), latencies as Go durations (5us) or
// seconds. Errors name the key and the value.
func ParseCluster(spec string) (Cluster, error) {
	spec = strings.TrimSpace(spec)
	name, rest, _ := strings.Cut(spec, ":")
	var c Cluster
	if name == "custom" {
		c = Cluster{Name: "custom", GPUsPerNIC: 1}
	} else {
		p, ok := Preset(name)
		if !ok {
			return c, fmt.Errorf("unknown cluster %q: want %s, or custom:gpus=G,net=BW,local=BW", name, strings.Join(PresetNames(), ", "))
		}
		c = p
	}
	if strings.TrimSpace(rest) != "" {
		for _, kv := range strings.Split(rest, ",") {
			k, v, ok := strings.Cut(strings.TrimSpace(kv), "=")
			if !ok {
				return c, fmt.Errorf("cluster %q: %q is not key=value", spec, kv)
			}
			if err := c.Set(strings.TrimSpace(k), strings.TrimSpace(v)); err != nil {
				return c, fmt.Errorf("cluster %q: %w", spec, err)
			}
		}
	}
	return c, c.Validate()
}

// Set sets the cluster's setting k (a key of ParseCluster's spec: gpus,
// net, local, net-latency, local-latency, copy, gpus-per-nic, msg-rate,
// msg-burst, topology, rails) to the value v as the spec spells it ("0" or
// "free" for free copies; msg-rate as 50M, 5e7 or 50M/s messages per
// second, "0" or "off" for no limit; topology rail or fattree). An error names
// the key and the value and, for a bad value, wraps the parse error. Set
// does not validate the whole cluster (Validate does).
func (c *Cluster) Set(k, v string) error {
	var err error
	switch k {
	case "gpus", "gpus-per-nic", "msg-burst", "rails":
		n, e := strconv.Atoi(v)
		if e != nil || n < 1 {
			return fmt.Errorf("%s=%s: want a positive integer", k, v)
		}
		switch k {
		case "gpus":
			c.DomainGPUs = n
		case "gpus-per-nic":
			c.GPUsPerNIC = n
		case "msg-burst":
			c.MsgBurst = n
		default:
			c.Rails = n
		}
	case "msg-rate":
		c.MsgRate, err = parseMsgRate(v)
	case "topology":
		switch v {
		case TopoRail, TopoFatTree:
			c.Topology = v
		case "fat-tree":
			c.Topology = TopoFatTree
		default:
			return fmt.Errorf("%s=%s: want rail or fattree", k, v)
		}
	case "net":
		c.NetBW, err = units.ParseRate(v)
	case "local":
		c.LocalBW, err = units.ParseRate(v)
	case "copy":
		if v == "0" || v == "free" {
			c.CopyBW = 0
		} else {
			c.CopyBW, err = units.ParseRate(v)
		}
	case "net-latency":
		c.NetLatency, err = units.ParseSeconds(v)
	case "local-latency":
		c.LocalLatency, err = units.ParseSeconds(v)
	default:
		return fmt.Errorf("unknown key %q: want gpus, net, local, net-latency, local-latency, copy, gpus-per-nic, msg-rate, msg-burst, topology or rails", k)
	}
	if err != nil {
		return fmt.Errorf("%s=%s: %w", k, v, err)
	}
	return nil
}

// Validate checks that every field can be used.
func (c Cluster) Validate() error {
	switch {
	case c.DomainGPUs < 1:
		return fmt.Errorf("cluster %s: %d GPUs per domain, want at least 1 (gpus=G)", c.Name, c.DomainGPUs)
	case c.GPUsPerNIC < 1:
		return fmt.Errorf("cluster %s: %d GPUs per NIC, want at least 1", c.Name, c.GPUsPerNIC)
	case !(c.NetBW > 0) || math.IsInf(c.NetBW, 0):
		return fmt.Errorf("cluster %s: network bandwidth %g B/s, want a positive rate (net=50GB/s)", c.Name, c.NetBW)
	case !(c.LocalBW > 0) || math.IsInf(c.LocalBW, 0):
		return fmt.Errorf("cluster %s: local bandwidth %g B/s, want a positive rate (local=900GB/s)", c.Name, c.LocalBW)
	case c.NetLatency < 0 || c.LocalLatency < 0 || math.IsNaN(c.NetLatency+c.LocalLatency) || math.IsInf(c.NetLatency+c.LocalLatency, 0):
		return fmt.Errorf("cluster %s: latencies %g s and %g s, want finite and >= 0", c.Name, c.NetLatency, c.LocalLatency)
	case c.CopyBW < 0 || math.IsNaN(c.CopyBW) || math.IsInf(c.CopyBW, 0):
		return fmt.Errorf("cluster %s: copy bandwidth %g B/s, want >= 0 (0 makes copies free)", c.Name, c.CopyBW)
	case c.MsgRate < 0 || math.IsNaN(c.MsgRate) || math.IsInf(c.MsgRate, 0):
		return fmt.Errorf("cluster %s: message rate %g/s, want >= 0 (0: no limit; msg-rate=50M)", c.Name, c.MsgRate)
	case c.MsgBurst < 0 || c.Rails < 0:
		return fmt.Errorf("cluster %s: message burst %d and rails %d, want >= 0", c.Name, c.MsgBurst, c.Rails)
	case c.Topology != "" && c.Topology != TopoFatTree && c.Topology != TopoRail:
		return fmt.Errorf("cluster %s: topology %q, want rail or fattree", c.Name, c.Topology)
	}
	return nil
}

// parseMsgRate reads a message rate: a number with an optional k, M or G
// (decimal) and an optional "/s" or "msg/s"; "0" or "off" for no limit.
func parseMsgRate(v string) (float64, error) {
	if v == "off" {
		return 0, nil
	}
	s := strings.TrimSuffix(strings.TrimSuffix(v, "/s"), "msg")
	mult := 1.0
	if n := len(s); n > 0 {
		switch s[n-1] {
		case 'k', 'K':
			mult, s = 1e3, s[:n-1]
		case 'M':
			mult, s = 1e6, s[:n-1]
		case 'G':
			mult, s = 1e9, s[:n-1]
		}
	}
	x, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
	if err != nil || x < 0 || math.IsInf(x, 0) || math.IsNaN(x) {
		return 0, fmt.Errorf("want messages per second, e.g. 50M, 5e7 or 0")
	}
	return x * mult, nil
}

// String renders the cluster in ParseCluster's custom form.
func (c Cluster) String() string {
	return fmt.Sprintf("%s: %d GPUs per domain, network %s per NIC (%d GPU(s) each) + %s per message, local %s + %s per message, copy %s",
		c.Name, c.DomainGPUs, units.FormatRate(c.NetBW), c.GPUsPerNIC, units.FormatSeconds(c.NetLatency), units.FormatRate(c.LocalBW),
		units.FormatSeconds(c.LocalLatency), copyString(c.CopyBW)) + c.networkString()
}

// networkString describes the message rate and the topology ("" for no
// limit on a fat tree, so that a cluster without them prints as before).
func (c Cluster) networkString() string {
	var s string
	if c.MsgRate > 0 {
		s += fmt.Sprintf(", %s messages/s per NIC (burst %d)", formatCount(c.MsgRate), max(c.MsgBurst, 1))
	}
	if c.rail() {
		rails := "a rail per NIC of a domain"
		if c.Rails > 0 {
			rails = fmt.Sprintf("%d rails", c.Rails)
		}
		s += fmt.Sprintf(", rail-optimised network (%s, cross-rail messages relayed over NVLink)", rails)
	}
	return s
}

// formatCount prints a count per second with a decimal prefix (50M).
func formatCount(x float64) string {
	switch {
	case x >= 1e9:
		return strconv.FormatFloat(x/1e9, 'g', 4, 64) + "G"
	case x >= 1e6:
		return strconv.FormatFloat(x/1e6, 'g', 4, 64) + "M"
	case x >= 1e3:
		return strconv.FormatFloat(x/1e3, 'g', 4, 64) + "k"
	}
	return strconv.FormatFloat(x, 'g', 4, 64)
}

func copyString(bw float64) string {
	if bw == 0 {
		return "free"
	}
	return units.FormatRate(bw)
}

// rankPlacement maps a communicator's ranks onto GPUs of the cluster: the domain
// each rank sits in and, for NIC sharing, its position inside the domain.
// The topology is the one the schedules were built for.
type rankPlacement struct {
	// Domain[r] is rank r's domain (dense ids from 0).
	Domain []int
	// Nic[r] is the NIC rank r sends and receives network traffic through.
	Nic  []int
	Nics int
	// NicBase[d] and NicCount[d] are domain d's NICs: ids
	// [NicBase[d], NicBase[d]+NicCount[d]).
	NicBase, NicCount []int
	// NicDomain[n] is NIC n's domain.
	NicDomain []int
}

// relayNic is the NIC a network message from NIC a to NIC b leaves
// through on a rail topology: a itself when both are on one rail, else the
// NIC of a's host on b's rail (a's host is the group of rails NICs a sits
// in; when that host has no such NIC, the domain's first host's), else a
// (a domain without a NIC on that rail sends directly).
func (p rankPlacement) relayNic(c Cluster, a, b int) int {
	rails := c.Rails
	da, db := p.NicDomain[a], p.NicDomain[b]
	if rails <= 0 {
		rails = max(p.NicCount[da], p.NicCount[db])
	}
	pa, pb := a-p.NicBase[da], b-p.NicBase[db]
	rb := pb % rails
	if pa%rails == rb {
		return a
	}
	if q := pa - pa%rails + rb; q < p.NicCount[da] {
		return p.NicBase[da] + q
	}
	if rb < p.NicCount[da] {
		return p.NicBase[da] + rb
	}
	return a
}

// placeRanks puts world ranks on the cluster by topo (a nil Domain puts every
// rank in a domain of its own). It fails when a domain holds more ranks
// than the cluster's DomainGPUs.
func placeRanks(c Cluster, topo reshard.Topology, world int) (rankPlacement, error) {
	if err := c.Validate(); err != nil {
		return rankPlacement{}, err
	}
	if topo.Domain != nil && len(topo.Domain) != world {
		return rankPlacement{}, fmt.Errorf("sim: topology names %d ranks, the program has %d", len(topo.Domain), world)
	}
	p := rankPlacement{Domain: make([]int, world), Nic: make([]int, world)}
	ids := map[int]int{}
	count := []int{}
	for r := 0; r < world; r++ {
		key := r
		if topo.Domain != nil {
			key = topo.Domain[r]
		}
		id, ok := ids[key]
		if !ok {
			id = len(count)
			ids[key] = id
			count = append(count, 0)
		}
		p.Domain[r] = id
		count[id]++
	}
	for d, n := range count {
		if n > c.DomainGPUs {
			return rankPlacement{}, fmt.Errorf("sim: domain %d holds %d ranks; a %s domain has %d GPUs", d, n, c.Name, c.DomainGPUs)
		}
	}
	// NICs: consecutive ranks of a domain, in rank order, share one.
	pos := make([]int, len(count))
	base := make([]int, len(count))
	next := 0
	for d, n := range count {
		base[d] = next
		next += (n + c.GPUsPerNIC - 1) / c.GPUsPerNIC
	}
	for r := 0; r < world; r++ {
		d := p.Domain[r]
		p.Nic[r] = base[d] + pos[d]/c.GPUsPerNIC
		pos[d]++
	}
	p.Nics = next
	p.NicBase, p.NicCount, p.NicDomain = base, make([]int, len(count)), make([]int, next)
	for d := range count {
		p.NicCount[d] = (count[d] + c.GPUsPerNIC - 1) / c.GPUsPerNIC
		for n := base[d]; n < base[d]+p.NicCount[d]; n++ {
			p.NicDomain[n] = d
		}
	}
	return p, nil
}
