package transporttest

// ColocatedCases returns pairs, as returned with err by DefaultPairs,
// FP8Pairs or ParsePairs, each with both meshes on the same ranks
// (Colocated, the arrangement of the GPUs of one host); err, if not nil,
// is returned as it is.
func ColocatedCases(pairs []Pair, err error) ([]Case, error) {
	if err != nil {
		return nil, err
	}
	out := make([]Case, 0, len(pairs))
	for _, p := range pairs {
		c, err := p.Layouts(Colocated)
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, nil
}
