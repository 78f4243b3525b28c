// Package envopts reads the settings of m2n jobs that a program takes
// from its flags or, where a flag does not give one, from the M2N_
// environment: one place that knows what each setting means, how it is
// spelled and what values it may take, so that every program that
// honours them reads them alike and blames the flag or variable that
// gave a bad value.
//
// A setting has a key ("chunk-bytes"), which is also refit's flag, and a
// variable: M2N_ and the key in capitals ("M2N_CHUNK_BYTES"). A Lookup
// says where a program finds each; Env reads the variables alone.
//
//	s, err := envopts.Resolve(envopts.Env)
//	// M2N_CHUNK_BYTES=1MiB M2N_TIMEOUT=30s: s.Options.ChunkBytes == 1<<20, s.Options.Timeout == 30s
//	var e *envopts.Error // errors.As(err, &e): e.Name is "M2N_TIMEOUT", e.Value its text
package envopts

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/m2n-dev/m2n/bounds"
	"github.com/m2n-dev/m2n/hier"
	"github.com/m2n-dev/m2n/routespec"
	"github.com/m2n-dev/m2n/session"
	"github.com/m2n-dev/m2n/units"
)

// Source is a setting's text and the name to blame for it: a flag
// ("--chunk-bytes") or a variable ("M2N_CHUNK_BYTES"); Value is "" where
// nothing gives the setting.
type Source struct{ Value, Name string }

// Lookup returns where the setting key comes from.
type Lookup func(key string) Source

// Var is the environment variable of key: "chunk-bytes" is
// M2N_CHUNK_BYTES.
func Var(key string) string { return "M2N_" + strings.ToUpper(strings.ReplaceAll(key, "-", "_")) }

// Env looks settings up in the environment alone.
func Env(key string) Source {
	return Source{strings.TrimSpace(os.Getenv(Var(key))), Var(key)}
}

// Error is a setting that cannot be used, naming where it came from.
type Error struct {
	Source
	Err error
}

func (e *Error) Error() string { return fmt.Sprintf("%s %q: %v", e.Name, e.Value, e.Err) }
func (e *Error) Unwrap() error { return e.Err }

// Bad returns the error of a setting whose value cannot be used.
func (s Source) Bad(err error) error { return &Error{s, err} }

// Settings are what a lookup resolves to.
type Settings struct {
	// Options are the session's: Timeout, ChunkBytes, StagingBytes,
	// CoalesceBytes (0 turns coalescing off), Domains, EmulateNetBW and
	// NoInPlace (mpi-inplace 0) as given, the rest left to the program.
	Options session.Options
	Balance hier.Balance
	// Fabric is the data-movement model's (routespec.DefaultFabric with
	// the latency setting; the emulated rate as the network's; net-bw and
	// local-bw as given: FabricGiven). MeasureLocal says the local
	// bandwidth should be measured (emulating, local-bw not given).
	Fabric       bounds.Fabric
	FabricGiven  bool
	MeasureLocal bool
	// Timeout and Emulate are where the timeout and the emulated rate
	// came from, for messages about them.
	Timeout, Emulate Source
}

// MaxTimeout bounds the timeout: a wait longer than a day is a typo.
const MaxTimeout = 24 * time.Hour

// Resolve reads every setting through get: timeout (a duration from 1ms
// to a day), chunk-bytes, staging-bytes (positive sizes), coalesce-bytes
// (a size, 0 for none), balance, src-domain-size and dst-domain-size
// (whole numbers of ranks), emulate-net-bw (at least 1kB/s), net-bw,
// local-bw (rates), latency (a duration of at least 0; 20us where not
// given), and the variables some packages read themselves: pack-batch (1
// to 8), memcpy-min (a whole number) and mpi-inplace (0 or 1). The first
// that cannot be used is an *Error, returned beside the settings resolved
// before it (a program that refuses to run still joins its peers with
// them).
func Resolve(get Lookup) (Settings, error) {
	var s Settings
	for _, step := range []func(Lookup, *Settings) error{resolveTimeout, resolveSizes, resolveDomains, resolveFabric, resolveOthers} {
		if err := step(get, &s); err != nil {
			return s, err
		}
	}
	return s, nil
}

func resolveTimeout(get Lookup, s *Settings) error {
	s.Timeout = Source{session.DefaultTimeout.String(), "the default --timeout"}
	src := get("timeout")
	if src.Value == "" {
		return nil
	}
	s.Timeout = src
	d, err := time.ParseDuration(src.Value)
	switch {
	case err != nil:
		return src.Bad(fmt.Errorf("want a duration from 1ms to %v, like 30s or 5m", MaxTimeout))
	case d < time.Millisecond:
		return src.Bad(errors.New("want at least 1ms: every wait of the job is bounded by it"))
	case d > MaxTimeout:
		return src.Bad(fmt.Errorf("want at most %v", MaxTimeout))
	}
	s.Options.Timeout = d
	return nil
}

func resolveSizes(get Lookup, s *Settings) error {
	for _, x := range []struct {
		key string
		dst *int64
	}{{"chunk-bytes", &s.Options.ChunkBytes}, {"staging-bytes", &s.Options.StagingBytes}, {"coalesce-bytes", &s.Options.CoalesceBytes}} {
		src := get(x.key)
		if src.Value == "" {
			continue
		}
		n, err := units.ParseBytes(src.Value)
		switch {
		case err != nil:
			return src.Bad(err)
		case n == 0 && x.key == "coalesce-bytes":
			n = -1 // off
		case n == 0:
			return src.Bad(errors.New("want a positive size"))
		}
		*x.dst = n
	}
	src := get("balance")
	var err error
	if s.Balance, err = hier.ParseBalance(src.Value); err != nil {
		return src.Bad(err)
	}
	return nil
}

func resolveDomains(get Lookup, s *Settings) error {
	for _, x := range []struct {
		key string
		dst *int
	}{{"src-domain-size", &s.Options.Domains.Src}, {"dst-domain-size", &s.Options.Domains.Dst}} {
		src := get(x.key)
		if src.Value == "" {
			continue
		}
		n, err := strconv.Atoi(strings.TrimSpace(src.Value))
		switch {
		case err != nil:
			return src.Bad(errors.New("want a whole number ranks per domain"))
		case n < 1:
			return src.Bad(errors.New("want at least 1 ranks per domain"))
		}
		*x.dst = n
	}
	return nil
}

func resolveFabric(get Lookup, s *Settings) error {
	var err error
	if src := get("emulate-net-bw"); src.Value != "" {
		s.Emulate = src
		if s.Options.EmulateNetBW, err = units.ParseRate(src.Value); err != nil {
			return src.Bad(err)
		}
		if s.Options.EmulateNetBW < 1e3 {
			return src.Bad(errors.New("want at least 1kB/s"))
		}
	}
	s.Fabric = routespec.DefaultFabric()
	if src := get("latency"); src.Value != "" {
		lat, err := time.ParseDuration(src.Value)
		if err != nil || lat < 0 {
			return src.Bad(errors.New("want a duration of at least 0, like 20us"))
		}
		s.Fabric.Latency = lat.Seconds()
	}
	if s.Options.EmulateNetBW > 0 {
		s.Fabric.NetBW, s.MeasureLocal = s.Options.EmulateNetBW, true
	}
	for _, x := range []struct {
		key string
		dst *float64
	}{{"net-bw", &s.Fabric.NetBW}, {"local-bw", &s.Fabric.LocalBW}} {
		src := get(x.key)
		if src.Value == "" {
			continue
		}
		s.FabricGiven = true
		if *x.dst, err = units.ParseRate(src.Value); err != nil {
			return src.Bad(err)
		}
		if x.key == "local-bw" {
			s.MeasureLocal = false
		}
	}
	return nil
}

// resolveOthers checks the variables other packages read themselves:
// the GPU pack kernels' batch and the fused FP8 kernels' resident blocks,
// vectors a lane and division test (cuda ignores a value it cannot use), the
// GPU replay's smallest memcpy (Join would name the rank twice), and the
// CPU transport's in-place strided moves.
func resolveOthers(get Lookup, s *Settings) error {
	for _, k := range []struct{ key, what string }{
		{"pack-batch", "regions each pack kernel launch takes"},
		{"fused-minb", "resident blocks per SM of the fused FP8 kernels"},
		{"fused-lane-vecs", "vectors each lane of a fused FP8 kernel's team takes"},
		{"fuse-streams", "streams the GPU replay spreads a step's fused FP8 kernels over"},
	} {
		if src := get(k.key); src.Value != "" {
			if n, err := strconv.Atoi(src.Value); err != nil || n < 1 || n > 8 {
				return src.Bad(fmt.Errorf("want a whole number from 1 to 8 (%s)", k.what))
			}
		}
	}
	switch src := get("fused-div"); src.Value {
	case "", "fma", "midpoint", "bracket":
	default:
		return src.Bad(errors.New("want fma (the default), midpoint or bracket (how the FP8 kernels make a quotient exact)"))
	}
	if src := get("memcpy-min"); src.Value != "" {
		if _, err := strconv.ParseInt(src.Value, 10, 64); err != nil {
			return src.Bad(errors.New("want a whole number of bytes (the GPU replay's smallest copy done as a memcpy)"))
		}
	}
	switch src := get("mpi-inplace"); src.Value {
	case "", "1":
	case "0":
		s.Options.NoInPlace = true
	default:
		return src.Bad(errors.New("want 0 (stage strided regions) or 1 (move them in place, the default)"))
	}
	return nil
}
