package sim

import (
	"fmt"
	"math"
	"slices"

	"gonum.org/v1/gonum/floats"
)

// Result is what a simulation found. Times are seconds from the start.
type Result struct {
	// Seconds is the completion time: when the last process finished.
	Seconds float64 `json:"seconds"`
	// Parts has each part's completion (its last process's finish).
	Parts []PartResult `json:"parts"`
	// Tensors has each tensor's completion: when its last message (or
	// local copy) completed.
	Tensors []TensorResult `json:"tensors,omitempty"`
	// Critical is the chain of posts, latencies, transfers and compute
	// that ends at Seconds.
	Critical Path `json:"critical_path"`
	// Links has every link that carried bytes, in link order.
	Links []LinkUsage `json:"-"`
	// Classes sums the links by class and direction.
	Classes []ClassUsage `json:"link_classes"`
	// Busiest are the links that carried the most bytes.
	Busiest []LinkUsage `json:"busiest_links"`
	// Series is link utilisation over time (nil with runOptions.Bins < 0).
	Series *Series `json:"series,omitempty"`
	// Network is what the network model beyond bandwidth and latency did:
	// the NIC message rate and the rail topology.
	Network NetworkUse `json:"network"`
	Stats   Stats      `json:"stats"`
}

// NetworkUse is what the NIC message rate and the topology did in a run.
type NetworkUse struct {
	// MsgRate is the cluster's NIC message rate (0: no limit).
	MsgRate float64 `json:"msg_rate,omitempty"`
	// RateDelayed counts the network messages the message rate held back
	// after their latency, RateDelaySec their waits summed; zero for both
	// means the rate never bound, and the run is what it is without it.
	RateDelayed  int     `json:"rate_delayed_messages"`
	RateDelaySec float64 `json:"rate_delay_s"`
	// MostMessagesLink is the NIC link that carried the most network
	// messages, MostMessages their count, and MsgRateUse that count over
	// what the rate allows in the run's time (0 without a limit).
	MostMessagesLink string  `json:"most_messages_link,omitempty"`
	MostMessages     int     `json:"most_messages"`
	MsgRateUse       float64 `json:"msg_rate_use,omitempty"`
	// Topology is "fattree" or "rail"; Relayed counts the network
	// messages a rail topology relayed through the source domain's NIC on
	// the destination's rail.
	Topology string `json:"topology"`
	Relayed  int64  `json:"relayed_messages,omitempty"`
}

// PartResult is one part's completion.
type PartResult struct {
	Name     string  `json:"name"`
	Route    string  `json:"route"`
	Seconds  float64 `json:"seconds"`
	Messages int     `json:"messages"`
	Rounds   int     `json:"rounds"`
}

// TensorResult is one tensor's completion and the bytes its messages moved
// (local copies included).
type TensorResult struct {
	Name    string  `json:"name"`
	Seconds float64 `json:"seconds"`
	Bytes   int64   `json:"bytes"`
}

// Path is the critical path: following back from the end, what each step
// waited for. A process that finished last waited for a round; the round
// completed with its last message; that message's flow started after its
// later end posted it and its latency passed; that end posted when its
// thread was released by a round of its own (or its compute ended, or the
// run started), and so on back to time 0.
type Path struct {
	Steps []Step `json:"steps"`
	// Binding is the link the path spent the most transfer time on, and
	// BindingSeconds that time.
	Binding        string  `json:"binding_link"`
	BindingSeconds float64 `json:"binding_link_seconds"`
	// Shares is the path's time by kind: each link class and direction of
	// a transfer's bottleneck ("network out", "local in", ...), latency,
	// compute.
	Shares []Share `json:"shares"`
}

// Share is part of a path's time.
type Share struct {
	Kind    string  `json:"kind"`
	Seconds float64 `json:"seconds"`
}

// Step is one step of the critical path, over [From, To].
type Step struct {
	// Kind is "transfer" (a flow moving bytes, bound mostly by Link),
	// "latency" (a message's per-message latency), "post" (a rank posts
	// a round; From == To), "compute" (copies, packing or unpacking on
	// the rank), or "follows" (a process starts when the same rank's
	// process of an earlier part ends).
	Kind  string  `json:"kind"`
	From  float64 `json:"from"`
	To    float64 `json:"to"`
	Rank  int     `json:"rank"`
	Part  string  `json:"part,omitempty"`
	Round int     `json:"round"`
	// Message is the message's index in its part's schedule (-1 for
	// none; the first of them when small messages coalesced).
	Message int    `json:"message"`
	Src     int    `json:"src,omitempty"`
	Dst     int    `json:"dst,omitempty"`
	Bytes   int64  `json:"bytes,omitempty"`
	Link    string `json:"link,omitempty"`
}

// LinkUsage is what one link carried.
type LinkUsage struct {
	Link  string  `json:"link"`
	Class string  `json:"class"`
	Dir   string  `json:"dir"`
	Bytes float64 `json:"bytes"`
	// Utilisation is Bytes over capacity times the run's time.
	Utilisation float64 `json:"utilisation"`
}

// ClassUsage sums the links of one class and direction that carried bytes.
type ClassUsage struct {
	Class    string  `json:"class"`
	Dir      string  `json:"dir"`
	Links    int     `json:"links"`
	Bytes    float64 `json:"bytes"`
	MeanUtil float64 `json:"mean_utilisation"`
	MaxUtil  float64 `json:"max_utilisation"`
}

// Series is link utilisation (share of capacity) per time bin.
type Series struct {
	BinSeconds float64      `json:"bin_seconds"`
	Lines      []SeriesLine `json:"lines"`
}

// SeriesLine is one curve: a link, or the mean of a class of links.
type SeriesLine struct {
	Name string    `json:"name"`
	Util []float64 `json:"utilisation"`
}

// Stats count the simulation's work.
type Stats struct {
	Messages int `json:"messages"`
	Procs    int `json:"processes"`
	Links    int `json:"links"`
	// FlowEvents counts flow arrivals and completions (two per message
	// between ranks; local copies count none).
	FlowEvents int64 `json:"flow_events"`
	// Batches counts the distinct event times; Solves the rate
	// recomputations, MeanRegion their mean size in links, Closures those
	// that took a whole connected component.
	Batches    int64   `json:"batches"`
	Solves     int64   `json:"solves"`
	MeanRegion float64 `json:"mean_region_links"`
	MaxRegion  int     `json:"max_region_links"`
	Closures   int64   `json:"closures"`
	// Growths counts the times a region grew (each refills it).
	Growths   int64 `json:"growths"`
	MaxGroups int   `json:"max_concurrent_groups"`
}

func (e *engine) linkName(l int32) (name, class, dir string) {
	w := int32(e.p.world)
	dir = "out"
	if l%2 == 1 {
		dir = "in"
	}
	if l < 2*w {
		return fmt.Sprintf("local-%s r%d", dir, l/2), "local", dir
	}
	n := int((l - 2*w) / 2)
	if e.nicFirst == nil {
		e.nicFirst, e.nicLast = make([]int, e.pl.Nics), make([]int, e.pl.Nics)
		for i := range e.nicFirst {
			e.nicFirst[i] = -1
		}
		for r, x := range e.pl.Nic {
			if e.nicFirst[x] < 0 {
				e.nicFirst[x] = r
			}
			e.nicLast[x] = r
		}
	}
	first, last := e.nicFirst[n], e.nicLast[n]
	if first == last {
		return fmt.Sprintf("nic-%s r%d", dir, first), "network", dir
	}
	return fmt.Sprintf("nic-%s r%d-%d", dir, first, last), "network", dir
}

func (e *engine) result() *Result {
	res := &Result{}
	for i := range e.ps {
		res.Seconds = math.Max(res.Seconds, e.ps[i].finish)
	}
	for pi, pt := range e.p.parts {
		pr := PartResult{Name: pt.Name, Route: pt.Route, Messages: pt.Messages, Rounds: pt.Rounds}
		for i := range e.ps {
			if int(e.p.procs[i].Part) == pi {
				pr.Seconds = math.Max(pr.Seconds, e.ps[i].finish)
			}
		}
		res.Parts = append(res.Parts, pr)
	}
	for _, x := range e.p.extra {
		e.tensorEnd[x.tensor] = math.Max(e.tensorEnd[x.tensor], e.mEnd[x.msg])
	}
	for t := range e.p.tensor {
		res.Tensors = append(res.Tensors, TensorResult{Name: e.p.tensor[t], Seconds: e.tensorEnd[t], Bytes: e.tensorBytes[t]})
	}
	// links
	f := e.f
	span := math.Max(res.Seconds, 1e-300)
	type key struct{ class, dir string }
	classes := map[key]*ClassUsage{}
	var order []key
	var used []int32
	for l := range f.caps {
		if f.bytes[l] <= 0 {
			continue
		}
		name, class, dir := e.linkName(int32(l))
		u := LinkUsage{Link: name, Class: class, Dir: dir, Bytes: f.bytes[l], Utilisation: f.bytes[l] / (f.caps[l] * span)}
		res.Links = append(res.Links, u)
		used = append(used, int32(l))
		k := key{class, dir}
		c := classes[k]
		if c == nil {
			c = &ClassUsage{Class: class, Dir: dir}
			classes[k] = c
			order = append(order, k)
		}
		c.Links++
		c.Bytes += u.Bytes
		c.MeanUtil += u.Utilisation
		c.MaxUtil = math.Max(c.MaxUtil, u.Utilisation)
	}
	slices.SortFunc(order, func(a, b key) int {
		if a.class != b.class {
			return -compareStrings(a.class, b.class) // network first
		}
		return -compareStrings(a.dir, b.dir) // out first
	})
	for _, k := range order {
		c := classes[k]
		c.MeanUtil /= float64(c.Links)
		res.Classes = append(res.Classes, *c)
	}
	busiest := slices.Clone(used)
	slices.SortStableFunc(busiest, func(a, b int32) int {
		switch {
		case f.bytes[a] > f.bytes[b]:
			return -1
		case f.bytes[a] < f.bytes[b]:
			return 1
		}
		return 0
	})
	top := e.opts.TopLinks
	if top <= 0 {
		top = 4
	}
	for i, l := range busiest {
		if i >= max(top, 8) {
			break
		}
		name, class, dir := e.linkName(l)
		res.Busiest = append(res.Busiest, LinkUsage{Link: name, Class: class, Dir: dir, Bytes: f.bytes[l], Utilisation: f.bytes[l] / (f.caps[l] * span)})
	}
	res.Critical = e.path()
	res.Network = e.networkUse(res.Seconds)
	if e.ser != nil {
		// the busiest link of each class and direction, and the link the
		// critical path spent the most time on
		var pick []int32
		taken := map[string]bool{}
		for _, l := range busiest {
			_, class, dir := e.linkName(l)
			if k := class + " " + dir; !taken[k] && len(pick) < top {
				taken[k] = true
				pick = append(pick, l)
			}
		}
		for _, l := range used {
			if name, _, _ := e.linkName(l); name == res.Critical.Binding && !slices.Contains(pick, l) {
				pick = append(pick, l)
			}
		}
		res.Series = e.seriesOut(res, used, pick)
	}
	st := f.stats
	res.Stats = Stats{Messages: len(e.p.msgs), Procs: len(e.p.procs), Links: len(f.caps), FlowEvents: e.flowEvents, Batches: e.batches,
		Solves: st.solves, MaxRegion: st.maxRegion, Closures: st.closures, Growths: st.expansionRun, MaxGroups: st.maxGroups}
	if st.solves > 0 {
		res.Stats.MeanRegion = float64(st.regionLinks) / float64(st.solves)
	}
	return res
}

func (e *engine) networkUse(span float64) NetworkUse {
	u := NetworkUse{MsgRate: e.c.MsgRate, Topology: TopoFatTree, Relayed: e.nRelayed, RateDelayed: len(e.rateWait)}
	if e.c.rail() {
		u.Topology = TopoRail
	}
	for _, d := range e.rateWait {
		u.RateDelaySec += d.wait
	}
	most := int32(-1)
	for l, n := range e.msgCount {
		if n > 0 && (most < 0 || n > e.msgCount[most]) {
			most = int32(l)
		}
	}
	if most >= 0 {
		u.MostMessagesLink, _, _ = e.linkName(most)
		u.MostMessages = int(e.msgCount[most])
		if e.c.MsgRate > 0 && span > 0 {
			u.MsgRateUse = float64(u.MostMessages) / (e.c.MsgRate * span)
		}
	}
	return u
}

func compareStrings(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func (e *engine) seriesOut(res *Result, used, top []int32) *Series {
	s := e.ser
	bins := min(s.n, int(math.Ceil(res.Seconds/s.width)))
	if bins < 1 {
		bins = 1
	}
	out := &Series{BinSeconds: s.width}
	// class means over the links that carried bytes.
	type acc struct {
		name string
		sum  []float64
		n    int
	}
	var accs []*acc
	find := func(name string) *acc {
		for _, a := range accs {
			if a.name == name {
				return a
			}
		}
		a := &acc{name: name, sum: make([]float64, bins)}
		accs = append(accs, a)
		return a
	}
	for _, cls := range []string{"network out", "network in", "local out", "local in"} {
		find(cls)
	}
	for _, l := range used {
		_, class, dir := e.linkName(l)
		a := find(class + " " + dir)
		floats.Add(a.sum, s.utilisation(l, e.f.caps[l], bins))
		a.n++
	}
	for _, a := range accs {
		if a.n == 0 {
			continue
		}
		floats.Scale(1/float64(a.n), a.sum)
		out.Lines = append(out.Lines, SeriesLine{Name: fmt.Sprintf("%s (mean of %d links)", a.name, a.n), Util: a.sum})
	}
	for _, l := range top {
		name, _, _ := e.linkName(l)
		out.Lines = append(out.Lines, SeriesLine{Name: name, Util: s.utilisation(l, e.f.caps[l], bins)})
	}
	return out
}

// causeTime is when a thread cause happened.
func (e *engine) causeTime(c int32) float64 {
	switch {
	case c >= 0:
		return e.rs[c].doneAt
	case c == causeStart:
		return 0
	}
	return e.ps[-2-c].finish
}

func (e *engine) path() Path {
	var p Path
	last := int32(-1)
	for i := range e.ps {
		if last < 0 || e.ps[i].finish > e.ps[last].finish {
			last = int32(i)
		}
	}
	if last < 0 {
		return p
	}
	eps := 1e-12 * (1 + e.ps[last].finish)
	part := func(pi int32) (string, int32) {
		pr := &e.p.procs[pi]
		return e.p.parts[pr.Part].Name, pr.Rank
	}
	var steps []Step
	var stepLink []int32 // the bound link of each transfer step, -1 for the others
	pi := last
	T := e.ps[pi].finish
	c := e.ps[pi].cause
	for {
		ct := e.causeTime(c)
		name, rank := part(pi)
		if T-ct > eps {
			steps = append(steps, Step{Kind: "compute", From: ct, To: T, Rank: int(rank), Part: name, Round: -1, Message: -1})
			stepLink = append(stepLink, -1)
		}
		if c == causeStart {
			break
		}
		if c < 0 {
			pred := -2 - c
			steps = append(steps, Step{Kind: "follows", From: ct, To: ct, Rank: int(rank), Part: name, Round: -1, Message: -1})
			stepLink = append(stepLink, -1)
			pi, T, c = pred, e.ps[pred].finish, e.ps[pred].cause
			continue
		}
		r := &e.rs[c]
		mi := r.last
		if mi < 0 {
			break
		}
		m := &e.p.msgs[mi]
		lat := e.msgLatency(mi)
		start := e.postAt[mi] + lat
		rd, waited := e.rateWait[mi]
		if waited {
			start += rd.wait
		}
		link := e.out[mi]
		if e.boundIn[mi] {
			link = e.in[mi]
		}
		lname, _, _ := e.linkName(link)
		pt := e.p.parts[m.Part]
		steps = append(steps, Step{Kind: "transfer", From: start, To: e.mEnd[mi], Rank: int(m.Dst), Part: pt.Name, Round: int(m.Round),
			Message: int(m.Index), Src: int(m.Src), Dst: int(m.Dst), Bytes: m.Bytes, Link: lname})
		stepLink = append(stepLink, link)
		if waited {
			rname, _, _ := e.linkName(rd.link)
			steps = append(steps, Step{Kind: "message rate", From: start - rd.wait, To: start, Rank: int(m.Dst), Part: pt.Name, Round: int(m.Round),
				Message: int(m.Index), Src: int(m.Src), Dst: int(m.Dst), Bytes: m.Bytes, Link: rname + " (message rate)"})
			stepLink = append(stepLink, -1)
		}
		if lat > 0 {
			steps = append(steps, Step{Kind: "latency", From: e.postAt[mi], To: start - rd.wait, Rank: int(m.Dst), Part: pt.Name, Round: int(m.Round),
				Message: int(m.Index), Src: int(m.Src), Dst: int(m.Dst), Bytes: m.Bytes})
			stepLink = append(stepLink, -1)
		}
		g := e.sendRS[mi]
		if e.lastSide[mi] == 1 {
			g = e.recvRS[mi]
		}
		pi = e.procOf(g)
		name, rank = part(pi)
		steps = append(steps, Step{Kind: "post", From: e.rs[g].postAt, To: e.rs[g].postAt, Rank: int(rank), Part: name, Round: int(m.Round), Message: -1})
		stepLink = append(stepLink, -1)
		T, c = e.rs[g].postAt, e.rs[g].waited
	}
	slices.Reverse(steps)
	slices.Reverse(stepLink)
	p.Steps = steps
	// shares and the binding link
	shares := map[string]float64{}
	links := map[string]float64{}
	for i, s := range steps {
		d := s.To - s.From
		switch s.Kind {
		case "transfer":
			_, class, dir := e.linkName(stepLink[i])
			shares[class+" "+dir] += d
			links[s.Link] += d
		case "latency", "compute":
			shares[s.Kind] += d
		case "message rate":
			shares[s.Kind] += d
			links[s.Link] += d
		}
	}
	for _, k := range []string{"network out", "network in", "local out", "local in", "latency", "message rate", "compute"} {
		if v := shares[k]; v > 0 {
			p.Shares = append(p.Shares, Share{Kind: k, Seconds: v})
		}
	}
	names := make([]string, 0, len(links))
	for n := range links {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		if links[n] > p.BindingSeconds {
			p.Binding, p.BindingSeconds = n, links[n]
		}
	}
	return p
}
