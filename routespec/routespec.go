// Package routespec is the one spelling of routes that m2n's programs
// take from people: the refit CLI's --route, the simulator's, the C ABI's
// route strings. A spec is a route's name and, optionally, the settings
// its route takes:
//
//	flat
//	agbcast
//	hier[:balance=count|bytes]
//	auto[:balance=...,net=50GB/s,local=900GB/s,latency=20us,buckets=256MiB]
//
// Rates and times are read by package units (net=400Gbps is 50 GB/s;
// plain numbers are bytes per second and seconds, so net_bw=5e10 works
// too). What a spec leaves out comes from Options: the fabric defaults
// to DefaultFabric.
//
//	r, err := routespec.Parse("auto:net=25GB/s", routespec.Options{Fabric: routespec.DefaultFabric()})
//	names, err := routespec.List("all,auto", false) // flat, agbcast, hier, auto
package routespec

import (
	"fmt"
	"slices"
	"strings"

	"github.com/m2n-dev/m2n/bounds"
	"github.com/m2n-dev/m2n/hier"
	"github.com/m2n-dev/m2n/reshard"
	"github.com/m2n-dev/m2n/units"
)

// DefaultFabric is the fabric the data-movement model (and auto's choice)
// assumes where nothing says otherwise: one 400 Gb/s NIC per rank (50
// GB/s: NDR InfiniBand, the paper's), 900 GB/s of local fabric per rank
// (NVLink 5, GB200) and 20 us per message.
func DefaultFabric() bounds.Fabric { return bounds.Fabric{NetBW: 50e9, LocalBW: 900e9, Latency: 20e-6} }

// Names are the routes besides auto, in the order "all" runs them.
var Names = []string{"flat", "agbcast", "hier"}

// List reads a comma list of route names (flat, agbcast, hier, auto, or
// all: flat, agbcast and hier) in order. When the routes convert in
// flight (converts: a destination in FP8), all is flat and hier:
// agbcast's all-gather cannot quantize.
func List(s string, converts bool) ([]string, error) {
	var out []string
	for _, r := range strings.Split(s, ",") {
		switch r = strings.TrimSpace(r); {
		case r == "all" && converts:
			out = append(out, "flat", "hier")
		case r == "all":
			out = append(out, Names...)
		case slices.Contains(Names, r) || r == "auto":
			out = append(out, r)
		default:
			return nil, fmt.Errorf("unknown route %q: want %s, auto or all", r, strings.Join(Names, ", "))
		}
	}
	return out, nil
}

// Options are what a spec does not say: hier's and auto's leader
// balance, auto's fabric and its bucket size (0: one route for all the
// tensors of a call).
type Options struct {
	Balance hier.Balance
	Fabric  bounds.Fabric
	Buckets int64
}

// Parse reads one route spec (see the package comment). Errors name the
// spec and, for a setting, the key and its value.
func Parse(spec string, o Options) (reshard.Route, error) {
	name, params, _ := strings.Cut(strings.TrimSpace(spec), ":")
	if err := o.set(name, params); err != nil {
		return nil, fmt.Errorf("route %q: %w", spec, err)
	}
	switch name {
	case "flat":
		return reshard.Flat, nil
	case "agbcast":
		return reshard.AllGatherBroadcast, nil
	case "hier":
		return hier.Hier{Balance: o.Balance}, nil
	case "auto":
		return bounds.Auto{Fabric: o.Fabric, Balance: o.Balance, Buckets: o.Buckets}, nil
	}
	return nil, fmt.Errorf("unknown route %q: want flat, agbcast, hier or auto", name)
}

// set applies a spec's key=value settings for route name.
func (o *Options) set(name, params string) error {
	for _, kv := range strings.Split(params, ",") {
		if kv = strings.TrimSpace(kv); kv == "" {
			continue
		}
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return fmt.Errorf("%q is not key=value", kv)
		}
		if err := o.setKey(name, strings.TrimSpace(k), strings.TrimSpace(v)); err != nil {
			return fmt.Errorf("%s=%s: %w", k, v, err)
		}
	}
	return nil
}

func (o *Options) setKey(name, k, v string) error {
	var err error
	switch {
	case k == "balance" && (name == "hier" || name == "auto"):
		o.Balance, err = hier.ParseBalance(v)
	case (k == "net" || k == "net_bw") && name == "auto":
		o.Fabric.NetBW, err = units.ParseRate(v)
	case (k == "local" || k == "local_bw") && name == "auto":
		o.Fabric.LocalBW, err = units.ParseRate(v)
	case k == "latency" && name == "auto":
		o.Fabric.Latency, err = units.ParseSeconds(v)
	case k == "buckets" && name == "auto":
		o.Buckets, err = units.ParseBytes(v)
	case slices.Contains([]string{"balance", "net", "net_bw", "local", "local_bw", "latency", "buckets"}, k):
		return fmt.Errorf("route %s takes no %s", name, k)
	default:
		return fmt.Errorf("unknown key (want balance; for auto also net, local, latency, buckets)")
	}
	return err
}
