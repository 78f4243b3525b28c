package reshard

import "github.com/m2n-dev/m2n/internal/checked"

// usage is one rank's bytes per round in one direction over one link
// class, as a sparse tree: level 0 holds the bytes of every round of a
// node of usageFan rounds, and each level above holds, per child node, the
// least usage in it (0 while some round of it is untouched). A node exists
// only once a round under it is charged, so that an absent node means
// usageFan^(level+1) untouched rounds, and the parent of every node exists.
// Usage only grows, so free (every round before it is full, usage >=
// budget) only moves forward.
type usage struct {
	nodes  [usageLevels]map[int32]*usageNode
	budget int64
	free   int
	// fronts remembers, for the few limits searched for most recently, a
	// round before which no round's usage is at most the limit (usage
	// only grows, so that stays true): the first answer of a search for
	// the limit that started at or before its front.
	fronts [usageFronts]usageFront
	nextFr int
	// the node of each level looked up last (nodes are never removed).
	cacheIdx [usageLevels]int32
	cacheNd  [usageLevels]*usageNode
}

// usageNode holds the usage of usageFan rounds (level 0) or the least
// usage of usageFan child nodes (0 for a child that does not exist), and
// the least of its own values.
type usageNode struct {
	v     [usageFan]int64
	least int64
}

func newUsage(budget int64) *usage {
	u := &usage{budget: budget}
	for k := range u.nodes {
		u.nodes[k] = map[int32]*usageNode{}
	}
	return u
}

// node returns node i of level k, nil if absent.
func (u *usage) node(k int, i int32) *usageNode {
	if nd := u.cacheNd[k]; nd != nil && u.cacheIdx[k] == i {
		return nd
	}
	nd := u.nodes[k][i]
	if nd != nil {
		u.cacheIdx[k], u.cacheNd[k] = i, nd
	}
	return nd
}

type usageFront struct {
	limit int64
	at    int
	set   bool
}

// find is first with what is known of the rounds before r: it starts the
// search past free (for limits below the budget) and past every front
// whose limit is at least limit, and when nothing between those and r was
// unknown, the answer becomes the front of limit.
func (u *usage) find(r int, limit int64) int {
	lower := 0 // every round before lower has usage above limit
	if limit < u.budget {
		lower = u.free // rounds before free hold at least the budget
	}
	exact := -1
	for i := range u.fronts {
		f := &u.fronts[i]
		if !f.set {
			continue
		}
		if f.limit == limit {
			exact = i
		}
		if f.limit >= limit {
			lower = max(lower, f.at)
		}
	}
	t := u.first(max(r, lower), limit)
	if r <= lower { // [0, t) is known to have no round with usage <= limit
		if exact < 0 {
			exact = u.nextFr
			u.nextFr = (u.nextFr + 1) % usageFronts
		}
		u.fronts[exact] = usageFront{limit: limit, at: t, set: true}
	}
	return t
}

// first returns the first round t >= r whose usage is at most limit
// (limit >= 0, so an untouched round always qualifies), or maxRounds if no
// round below maxRounds does.
func (u *usage) first(r int, limit int64) int {
	if r >= maxRounds {
		return r
	}
	nd := u.node(0, int32(r>>usageBits))
	if nd == nil {
		return r
	}
	if nd.least <= limit { // else no round of the node qualifies
		for s := r & usageMask; s < usageFan; s++ {
			if nd.v[s] <= limit {
				return r&^usageMask | s
			}
		}
	}
	// climb: e is the node just searched in full, at level k-1.
	e := r >> usageBits
	for k := 1; k < usageLevels; k++ {
		i := e >> usageBits
		nd = u.node(k, int32(i))
		if nd == nil { // cannot happen (parents exist); the rest of it is untouched
			return (e + 1) << (usageBits * k)
		}
		for s := e&usageMask + 1; s < usageFan; s++ {
			if nd.v[s] <= limit {
				return u.descend(k, i<<usageBits|s, limit)
			}
		}
		e = i
	}
	return maxRounds
}

// descend returns the first round under node e of level k-1 whose usage
// is at most limit; the node's least usage is.
func (u *usage) descend(k, e int, limit int64) int {
	for ; k > 0; k-- {
		nd := u.node(k-1, int32(e))
		if nd == nil {
			return e << (usageBits * k)
		}
		s := 0
		for nd.v[s] > limit {
			s++ // a slot qualifies: the parent holds this node's least usage
		}
		e = e<<usageBits | s
	}
	return e
}

// add charges n > 0 bytes to round r < maxRounds and moves free past the
// rounds that are now full.
func (u *usage) add(r int, n int64) {
	e := r
	var least int64 // the least usage of the node just updated
	var now int64   // round r's usage after the charge
	for k := 0; k < usageLevels; k++ {
		i := int32(e >> usageBits)
		s := e & usageMask
		nd := u.node(k, i)
		created := nd == nil
		if created { // a new node, and (below) its slot in a parent
			nd = new(usageNode)
			u.nodes[k][i] = nd
			u.cacheIdx[k], u.cacheNd[k] = i, nd
		}
		old := nd.v[s]
		if k == 0 {
			nd.v[s] = checked.SatSum(old, n)
			now = nd.v[s]
		} else {
			nd.v[s] = least
		}
		prev := nd.least
		if old == prev && nd.v[s] != old { // the slot held the least: it may have grown
			m := nd.v[0]
			for _, v := range nd.v[1:] {
				m = min(m, v)
			}
			nd.least = m
		}
		if !created && nd.least == prev {
			break // this node's least usage did not change: nothing above does
		}
		least = nd.least
		e >>= usageBits
	}
	if r == u.free && now >= u.budget {
		u.free = u.first(r, u.budget-1)
	}
}
