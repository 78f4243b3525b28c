package mesh

import (
	"slices"
	"strings"
	"testing"
)

func TestParseShape(t *testing.T) {
	tests := []struct {
		in   string
		want []int
		err  string
	}{
		{in: "4x2", want: []int{4, 2}},
		{in: "8", want: []int{8}},
		{in: " 2x2x2 ", want: []int{2, 2, 2}},
		{in: "", err: "empty mesh shape"},
		{in: "4x0", err: "axis length 0"},
		{in: "4x-1", err: "axis length -1"},
		{in: "4xx2", err: `axis "" is not an integer`},
		{in: "a", err: `axis "a" is not an integer`},
		{in: "1x1x1x1x1x1x1x1x1", err: "9 axes"},
	}
	for _, tc := range tests {
		got, err := ParseShape(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("ParseShape(%q) error %v, want %q", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("ParseShape(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
}

func TestParseRanks(t *testing.T) {
	tests := []struct {
		in   string
		want []int
		err  string
	}{
		{in: "0-7", want: []int{0, 1, 2, 3, 4, 5, 6, 7}},
		{in: "8,3,5", want: []int{8, 3, 5}},
		{in: "4-5,0-1", want: []int{4, 5, 0, 1}},
		{in: "3", want: []int{3}},
		{in: "", err: "empty rank list"},
		{in: "1,1", err: "repeats rank 1"},
		{in: "0-3,2", err: "repeats rank 2"},
		{in: "5-3", err: "runs backwards"},
		{in: "-1", err: "not a non-negative rank"},
		{in: "a-3", err: "not a non-negative rank"},
		{in: "1-b", err: "not a range"},
	}
	for _, tc := range tests {
		got, err := ParseRanks(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("ParseRanks(%q) error %v, want %q", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("ParseRanks(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
}

func TestMeshIndexing(t *testing.T) {
	for _, tc := range []struct {
		name  string
		shape []int
		ranks []int
	}{
		{"interval", []int{2, 3}, []int{4, 5, 6, 7, 8, 9}},
		{"permuted", []int{2, 3}, []int{9, 4, 7, 5, 8, 6}},
		{"3-D", []int{2, 1, 2}, []int{0, 3, 1, 2}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := New(tc.shape, tc.ranks)
			if err != nil {
				t.Fatal(err)
			}
			if m.Size() != len(tc.ranks) {
				t.Fatalf("size %d", m.Size())
			}
			for i, r := range tc.ranks {
				if m.Index(r) != i || !m.Contains(r) || m.RankAt(i) != r {
					t.Errorf("rank %d: index %d, want %d", r, m.Index(r), i)
				}
				if got := m.IndexOf(m.Coord(i, nil)); got != i {
					t.Errorf("index %d round-trips to %d", i, got)
				}
			}
			if m.Contains(100) || m.Index(-1) != -1 {
				t.Error("mesh claims a rank it does not hold")
			}
		})
	}
	m, _ := Interval([]int{2, 4}, 8)
	if c := m.Coord(m.Index(14), nil); !slices.Equal(c, []int{1, 2}) {
		t.Errorf("rank 14 at %v, want [1 2]", c)
	}
	if s, ok := m.IsInterval(); !ok || s != 8 {
		t.Errorf("IsInterval = %d, %v", s, ok)
	}
	if got := m.String(); got != "2x4[8-15]" {
		t.Errorf("String() = %q", got)
	}
}

func TestMeshRejects(t *testing.T) {
	for _, tc := range []struct {
		name  string
		shape []int
		ranks []int
		err   string
	}{
		{"no axes", nil, nil, "at least one axis"},
		{"zero axis", []int{2, 0}, nil, "axis of size 0"},
		{"short list", []int{2, 2}, []int{0, 1, 2}, "holds 4 ranks, got a list of 3"},
		{"repeat", []int{3}, []int{0, 2, 0}, "repeats rank 0"},
		{"negative", []int{2}, []int{0, -3}, "outside [0, 1048576)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := New(tc.shape, tc.ranks)
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Fatalf("error %v, want %q", err, tc.err)
			}
		})
	}
	m, _ := Interval([]int{4}, 2)
	if err := m.Validate(5); err == nil || !strings.Contains(err.Error(), "reaches rank 5") {
		t.Errorf("Validate(5) = %v", err)
	}
	if err := m.Validate(6); err != nil {
		t.Errorf("Validate(6) = %v", err)
	}
}

func TestFormatRanks(t *testing.T) {
	for in, want := range map[string]string{"0-3,8,5": "0-3,8,5", "7,5,6,4": "7,5,6,4", "1,2": "1,2", "0-15": "0-15"} {
		r, _ := ParseRanks(in)
		if got := FormatRanks(r); got != want {
			t.Errorf("FormatRanks(%v) = %q, want %q", r, got, want)
		}
	}
}

// FuzzParse checks that the parsers never panic and that what they accept
// formats back to an equivalent list.
func FuzzParse(f *testing.F) {
	for _, s := range []string{"0-7", "8,3,5", "4x2", "0-3,12-15", "2x2x2", "1-", ",", "9999999999"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if r, err := ParseRanks(s); err == nil {
			back, err := ParseRanks(FormatRanks(r))
			if err != nil || !slices.Equal(back, r) {
				t.Fatalf("%q: %v formats to %q which parses to %v, %v", s, r, FormatRanks(r), back, err)
			}
		}
		if sh, err := ParseShape(s); err == nil {
			if _, err := Interval(sh, 0); err != nil && !strings.Contains(err.Error(), "too many ranks") {
				t.Fatalf("%q parses to %v, which Interval rejects: %v", s, sh, err)
			}
		}
	})
}
