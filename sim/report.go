package sim

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// Report is a simulation of every route of a problem on a cluster (refit
// sim --json prints it), beside the data-movement model's bounds.
type Report struct {
	Model         string  `json:"model,omitempty"`
	Source        string  `json:"source"`
	Destination   string  `json:"destination"`
	World         int     `json:"world"`
	Bytes         int64   `json:"bytes"`
	Rho           int     `json:"rho"`
	DstDomains    int     `json:"dst_domains"`
	Stages        int     `json:"stages"`
	Sequential    bool    `json:"sequential_stages,omitempty"`
	Cluster       Cluster `json:"cluster"`
	ChunkBytes    int64   `json:"chunk_bytes"`
	StagingBytes  int64   `json:"staging_bytes"`
	Balance       string  `json:"balance"`
	CoalesceBytes int64   `json:"coalesce_bytes"`
	InPlace       bool    `json:"in_place,omitempty"`
	Domains       []int   `json:"domains"`
	// Measured names the refit run report the simulation was compared
	// with (--measured).
	Measured string `json:"measured,omitempty"`
	// Anchors are the published times of this configuration (AnchorsFor).
	Anchors []Anchor      `json:"anchors,omitempty"`
	Routes  []RouteReport `json:"routes"`
}

// RouteReport is one route of a Report.
type RouteReport struct {
	Route        string         `json:"route"`
	Chosen       string         `json:"chosen"`
	Why          string         `json:"why,omitempty"`
	Seconds      float64        `json:"seconds"`
	MeasuredSec  float64        `json:"measured_s,omitempty"`
	SimOverMeas  float64        `json:"sim_over_measured,omitempty"`
	BoundSeconds float64        `json:"bound_s"`
	BoundBinding string         `json:"bound_binding"`
	Predicted    float64        `json:"bound_with_startup_s"`
	Ratio        float64        `json:"sim_over_bound"`
	BindingLink  string         `json:"binding_link"`
	BindingSec   float64        `json:"binding_link_seconds"`
	Shares       []Share        `json:"critical_path_shares"`
	Messages     int            `json:"messages"`
	Rounds       int            `json:"rounds"`
	Classes      []ClassUsage   `json:"link_classes"`
	Busiest      []LinkUsage    `json:"busiest_links"`
	Parts        []PartResult   `json:"stages"`
	Tensors      []TensorResult `json:"tensors,omitempty"`
	Critical     []Step         `json:"critical_path,omitempty"`
	Series       *Series        `json:"series,omitempty"`
	Network      NetworkUse     `json:"network"`
	Stats        Stats          `json:"stats"`
}

// Measured is the part of a refit run --json report (one communicator's
// run: perf.RunReport) that a simulation is compared with.
type Measured struct {
	Stage       *int    `json:"stage"`
	World       int     `json:"world"`
	Source      string  `json:"source"`
	Destination string  `json:"destination"`
	ChunkBytes  int64   `json:"chunk_bytes"`
	Staging     int64   `json:"staging_bytes"`
	Domains     []int   `json:"domains"`
	EmulatedBW  float64 `json:"emulated_net_bw"`
	Fabric      struct {
		NetBW, LocalBW, Latency float64
	} `json:"fabric"`
	Routes []struct {
		Route     string  `json:"route"`
		MedianSec float64 `json:"median_s"`
	} `json:"routes"`
}

// ReadMeasured reads a refit run --json report of one communicator's run
// (not of pipeline stages).
func ReadMeasured(r io.Reader) (*Measured, error) {
	dec := json.NewDecoder(r)
	var m Measured
	if err := dec.Decode(&m); err != nil {
		return nil, fmt.Errorf("not a refit run --json report: %w", err)
	}
	if dec.More() || m.Stage != nil {
		return nil, errors.New("a report of pipeline stages (refit run --pp-stages): compare one communicator's run")
	}
	if m.World < 1 || len(m.Domains) != m.World || len(m.Routes) == 0 {
		return nil, fmt.Errorf("the report has world %d, %d domains and %d routes", m.World, len(m.Domains), len(m.Routes))
	}
	return &m, nil
}

// Cluster returns the cluster a run emulated (refit run --emulate-net-bw):
// NICs at the cap, the local fabric at the bandwidth the run measured, the
// run's model latency per message; ok is false for a run that did not
// emulate.
func (m *Measured) Cluster() (c Cluster, ok bool) {
	if m.EmulatedBW <= 0 {
		return c, false
	}
	per := map[int]int{}
	most := 0
	for _, d := range m.Domains {
		per[d]++
		most = max(most, per[d])
	}
	return Cluster{Name: "emulated", DomainGPUs: most, NetBW: m.EmulatedBW, GPUsPerNIC: 1, LocalBW: m.Fabric.LocalBW,
		NetLatency: m.Fabric.Latency, LocalLatency: m.Fabric.Latency}, true
}

// ReadReports reads Reports (refit sim --json output), one after another.
func ReadReports(r io.Reader) ([]Report, error) {
	dec := json.NewDecoder(r)
	var out []Report
	for {
		var rep Report
		if err := dec.Decode(&rep); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return nil, fmt.Errorf("report %d is not refit sim --json output: %w", len(out)+1, err)
		}
		out = append(out, rep)
	}
	if len(out) == 0 {
		return nil, errors.New("no refit sim --json reports")
	}
	return out, nil
}

// UseMeasured makes c simulate what the measured run m ran: m's chunking,
// m's routes unless keep("route"), and, when m emulated the network and
// not keep("cluster"), the cluster the emulation makes, with strided
// regions moved in place (MPI datatypes) unless keep("in-place") and
// messages coalesced up to refit run's CPU default of 64 KiB (the report
// does not record it) unless keep("coalesce-bytes"). keep names the
// settings the caller gave, as refit sim's flags. It also sets c.Measured.
func (c *Config) UseMeasured(m *Measured, keep func(setting string) bool) error {
	c.Measured = m
	c.Schedule.ChunkBytes, c.Schedule.StagingBytes = m.ChunkBytes, m.Staging
	if !keep("route") {
		c.Routes = c.Routes[:0]
		for _, r := range m.Routes {
			c.Routes = append(c.Routes, r.Route)
		}
	}
	emu, ok := m.Cluster()
	if !ok || keep("cluster") {
		return nil
	}
	c.Cluster = emu
	if !keep("in-place") {
		c.InPlace = true
	}
	if !keep("coalesce-bytes") {
		c.CoalesceBytes = 64 << 10
	}
	return c.Cluster.Validate()
}
