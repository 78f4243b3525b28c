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
}

// Presets are the clusters --cluster names. Bandwidths are per GPU and
// direction; latencies and copy rates are assumptions stated in Notes.
var Presets = []Cluster{
	{Name: "gb200-nvl72", DomainGPUs: 72, NetBW: 50e9, GPUsPerNIC: 1, NetLatency: 5e-6, LocalBW: 900e9, LocalLatency: 2e-6, CopyBW: 3.2e12},
	{Name: "hgx-h200", DomainGPUs: 8, NetBW: 50e9, GPUsPerNIC: 1, NetLatency: 5e-6, LocalBW: 450e9, LocalLatency: 2e-6, CopyBW: 1.9e12},
}

// PresetNotes says where each preset's numbers come from, by name.
var PresetNotes = map[string]string{
	"gb200-nvl72": "72 GPUs per NVLink 5 domain, 900 GB/s each way per GPU; one 400 Gb/s ConnectX-7 (50 GB/s) per GPU; " +
		"latencies 5 us (network) and 2 us (NVLink) per message are assumptions; copy 3.2 TB/s is the H200's measured " +
		"pack rate scaled by HBM3e bandwidth (8 vs 4.8 TB/s), unmeasured",
	"hgx-h200": "8 GPUs per host on NVLink 4 (NVSwitch), 450 GB/s each way per GPU; one 400 Gb/s NIC (50 GB/s) per GPU; " +
		"latencies 5 us and 2 us are assumptions; copy 1.9 TB/s is refit pack-bench's pack rate on an H200",
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
// gpus, net, local, net-latency, local-latency, copy, gpus-per-nic; rates
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
// net, local, net-latency, local-latency, copy, gpus-per-nic) to the value
// v as the spec spells it ("0" or "free" for free copies). An error names
// the key and the value and, for a bad value, wraps the parse error. Set
// does not validate the whole cluster (Validate does).
func (c *Cluster) Set(k, v string) error {
	var err error
	switch k {
	case "gpus", "gpus-per-nic":
		n, e := strconv.Atoi(v)
		if e != nil || n < 1 {
			return fmt.Errorf("%s=%s: want a positive integer", k, v)
		}
		if k == "gpus" {
			c.DomainGPUs = n
		} else {
			c.GPUsPerNIC = n
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
		return fmt.Errorf("unknown key %q: want gpus, net, local, net-latency, local-latency, copy or gpus-per-nic", k)
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
	}
	return nil
}

// String renders the cluster in ParseCluster's custom form.
func (c Cluster) String() string {
	return fmt.Sprintf("%s: %d GPUs per domain, network %s per NIC (%d GPU(s) each) + %s per message, local %s + %s per message, copy %s",
		c.Name, c.DomainGPUs, units.FormatRate(c.NetBW), c.GPUsPerNIC, units.FormatSeconds(c.NetLatency), units.FormatRate(c.LocalBW),
		units.FormatSeconds(c.LocalLatency), copyString(c.CopyBW))
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
	return p, nil
}
