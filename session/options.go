package session

import (
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/m2n-dev/m2n/control"
	"github.com/m2n-dev/m2n/hier"
	"github.com/m2n-dev/m2n/refit"
	"github.com/m2n-dev/m2n/reshard"
	"github.com/m2n-dev/m2n/transport"
)

// Device says where a session's tensors live and how they move.
type Device string

const (
	// CPU keeps tensors in host memory and moves them with MPI
	// point-to-point calls (strided regions in place with derived
	// datatypes).
	CPU Device = "cpu"
	// GPU keeps tensors in the memory of one GPU per rank (the GPU whose
	// ordinal is the rank's local rank on its host) and moves them with
	// NCCL, packing with the pack kernels.
	GPU Device = "cuda"
)

// ParseDevice reads a device name: cpu (or host) and cuda (or gpu).
func ParseDevice(s string) (Device, error) {
	switch s {
	case "", "cpu", "host":
		return CPU, nil
	case "cuda", "gpu":
		return GPU, nil
	}
	return "", fmt.Errorf("unknown device %q: want cpu or cuda", s)
}

// DefaultTimeout bounds every wait of a session whose Options leave
// Timeout at 0.
const DefaultTimeout = 5 * time.Minute

// Options configure a session. Every rank must pass equal options, except
// GPU and WrapTransport; Join checks that they agree.
type Options struct {
	// Device is where tensors live (default CPU).
	Device Device
	// Timeout bounds every wait: each collective of set-up, preparation and
	// each step, and each round of data movement (default DefaultTimeout).
	// A rank that waits longer gives up, names the ranks it waited for,
	// and stops every other rank of the session with that reason.
	Timeout time.Duration
	// ChunkBytes and StagingBytes bound messages and staging memory per
	// rank (reshard.ScheduleOptions); 0 takes the device's default: 16 MiB
	// and 256 MiB on CPUs, 64 MiB and 1 GiB on GPUs.
	ChunkBytes, StagingBytes int64
	// CoalesceBytes: messages of one round between one pair of ranks up to
	// this size travel as one operation, packed through staging (0: the
	// device's default, 64 KiB on CPUs and 1 MiB on GPUs; negative: off).
	CoalesceBytes int64
	// Domains override the discovered domains (hosts, or NVLink domains on
	// GPUs): hier.DomainSizes groups the source ranks, and separately the
	// destination ranks, of each call into domains of that many ranks.
	Domains hier.DomainSizes
	// Stripe spreads the sends of replicated source regions over all the
	// replicas (reshard.Options.StripeReplicas).
	Stripe bool
	// Verify checksums every message on both sides and compares the sums
	// before a step succeeds; Atomic leaves every destination untouched
	// unless every tensor of the step arrived everywhere.
	Verify, Atomic bool
	// Delta sends, each step after a call's first, only the elements that
	// changed since the step before (refit.Options.Delta): CPU sessions
	// only (Join refuses it on GPUs, a *reshard.FieldError naming delta).
	Delta bool
	// EmulateNetBW, in bytes per second, caps each rank's cross-domain
	// send and receive rate (netem.Wrap), so that routes' schedules show
	// on one machine; 0 is the real network.
	EmulateNetBW float64
	// NoInPlace makes the CPU device pack strided regions through staging
	// instead of moving them in place with MPI datatypes.
	NoInPlace bool
	// Driver is what moves the steps of GPU calls: refit.DriverReplay (the
	// default, or M2N_GPU_DRIVER), refit.DriverGraph or refit.DriverHost.
	// Calls with Verify or a tensor converted to FP8, and calls over an
	// emulated network or a WrapTransport, run on the host driver whatever
	// it says; on CPUs every call does, and only the host driver may be
	// asked for. It is this rank's choice alone: the bytes that move, and
	// the order in which they pair up between ranks, are the same with
	// every driver.
	Driver refit.DriverKind
	// Agree lists more fields every rank must share (a program's own
	// settings); Prepare fails naming the first rank and field that differ.
	Agree []control.Field
	// GPU, on GPU sessions, returns the ordinal of this rank's GPU given
	// its local rank on its host; nil picks the GPU whose ordinal is the
	// local rank. A program that already gave each rank its GPU (as
	// torch.cuda.set_device does) returns that one. Ranks may set it
	// differently.
	GPU func(localRank int) int
	// WrapTransport, if set, wraps the transport of every call, after the
	// network emulation: fault injection in tests. Ranks may set it
	// differently.
	WrapTransport func(transport.Transport) transport.Transport
}

// fields are the options every rank must share, as agreed fields.
func (o Options) fields() []control.Field {
	fs := []control.Field{
		{Name: "device", Value: string(o.Device)},
		{Name: "timeout", Value: o.Timeout.String()},
		{Name: "chunk bytes", Value: fmt.Sprint(o.ChunkBytes)},
		{Name: "staging bytes", Value: fmt.Sprint(o.StagingBytes)},
		{Name: "coalesce bytes", Value: fmt.Sprint(o.CoalesceBytes)},
		{Name: "domain sizes", Value: fmt.Sprintf("src %d, dst %d", o.Domains.Src, o.Domains.Dst)},
		{Name: "replica striping", Value: fmt.Sprint(o.Stripe)},
		{Name: "verify", Value: fmt.Sprint(o.Verify)},
		{Name: "atomic", Value: fmt.Sprint(o.Atomic)},
		{Name: "emulated network rate", Value: fmt.Sprint(o.EmulateNetBW)},
		{Name: "in-place strided moves off", Value: fmt.Sprint(o.NoInPlace)},
	}
	return append(fs, o.Agree...)
}

// Resolved returns the options as Join uses them, the device's defaults
// filled in, or the first option that is not valid (a
// *reshard.FieldError naming it): a program checks its settings with it
// before it joins, to name where a bad value came from.
func (o Options) Resolved() (Options, error) { return o.withDefaults() }

// withDefaults fills in the device's defaults and checks the options.
func (o Options) withDefaults() (Options, error) {
	var err error
	if o.Device, err = ParseDevice(string(o.Device)); err != nil {
		return o, err
	}
	if o.Timeout == 0 {
		o.Timeout = DefaultTimeout
	}
	envDriver := refit.DriverReplay
	if v, ok := os.LookupEnv("M2N_GPU_DRIVER"); ok {
		if envDriver, err = refit.ParseDriver(v); err != nil {
			return o, &reshard.FieldError{Field: "M2N_GPU_DRIVER", Got: v, Want: "host, replay or graph"}
		}
	}
	if o.Driver == "" {
		o.Driver = refit.DriverHost
		if o.Device == GPU {
			o.Driver = envDriver
		}
	}
	if _, err := refit.ParseDriver(string(o.Driver)); err != nil {
		return o, err
	}
	if o.Device != GPU && o.Driver != refit.DriverHost {
		return o, &reshard.FieldError{Field: "driver", Got: string(o.Driver), Want: "host",
			Why: "the replay and graph drivers move GPU calls: join with device cuda (refit: --device cuda)"}
	}
	if o.Timeout < 0 {
		return o, &reshard.FieldError{Field: "timeout", Got: o.Timeout.String(), Why: "must be positive"}
	}
	chunk, staging, coalesce := int64(16<<20), int64(256<<20), int64(64<<10)
	if o.Device == GPU {
		chunk, staging, coalesce = 64<<20, 1<<30, 1<<20
	}
	if o.ChunkBytes == 0 {
		o.ChunkBytes = chunk
	}
	if o.StagingBytes == 0 {
		o.StagingBytes = staging
	}
	switch {
	case o.CoalesceBytes == 0:
		o.CoalesceBytes = coalesce
	case o.CoalesceBytes < 0:
		o.CoalesceBytes = 0
	}
	if err := o.schedule().Validate(); err != nil {
		return o, err
	}
	if o.Domains.Src < 0 || o.Domains.Dst < 0 {
		return o, &reshard.FieldError{Field: "domain sizes", Got: fmt.Sprintf("src %d, dst %d", o.Domains.Src, o.Domains.Dst), Why: "must not be negative"}
	}
	if o.EmulateNetBW < 0 {
		return o, &reshard.FieldError{Field: "emulated network rate", Got: fmt.Sprint(o.EmulateNetBW), Why: "must not be negative"}
	}
	if o.Delta && o.Device == GPU {
		return o, &reshard.FieldError{Field: "delta", Got: "on", Why: "delta mode runs on the host driver, over host memory: " +
			"a session of device " + string(GPU) + " cannot use it (join with device cpu, or without delta)"}
	}
	return o, nil
}

func (o Options) schedule() reshard.ScheduleOptions {
	return reshard.ScheduleOptions{ChunkBytes: o.ChunkBytes, StagingBytes: o.StagingBytes}
}

// envInt64 reads an integer environment variable (0 when unset), or an
// error naming it.
func envInt64(name string) (int64, error) {
	v, ok := os.LookupEnv(name)
	if !ok || v == "" {
		return 0, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return 0, &reshard.FieldError{Field: name, Got: v, Want: "an integer"}
	}
	return n, nil
}
