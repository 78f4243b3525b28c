package perf

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/m2n-dev/m2n/units"
)

// torchPeer is what the torch peer of the FP8 benchmark
// (bench/peers/torch_fp8_block.py) measured: a PyTorch user's own 128x128
// block quantize of the same bf16 bytes, eager and under torch.compile,
// and a copy_ of them, each the median of its launches.
type torchPeer struct {
	Copy, Eager, Compile time.Duration // 0 where the peer did not report one
	// SameAsEager is what the peer said of torch.compile's bytes against
	// eager's ("True", "False", or "" when compile failed).
	SameAsEager string
	Output      string // the peer's whole output
}

// errNoPeer says the peer could not run here: no python3, or no torch
// with CUDA behind it. The error wraps it with the reason.
var errNoPeer = errors.New("the torch peer cannot run on this machine")

var peerLine = regexp.MustCompile(`(?m)^\s*(copy_ of the bf16 bytes|eager block quantize|torch\.compile block quantize):\s*([0-9.]+) us(.*)$`)

// runTorchPeer runs the peer script on rows x cols of bf16 (multiples of
// 128) with python3 (the first on PATH, or $M2N_PYTHON) and parses its
// medians. It fails wrapping errNoPeer
// when python3 or torch is missing, and stops the peer after timeout.
func runTorchPeer(script []byte, rows, cols int64, timeout time.Duration) (torchPeer, error) {
	if rows <= 0 || cols <= 0 || rows%128 != 0 || cols%128 != 0 {
		return torchPeer{}, fmt.Errorf("perf: torch peer: a %dx%d tensor is not whole 128x128 blocks", rows, cols)
	}
	py := os.Getenv("M2N_PYTHON")
	if py == "" {
		var err error
		if py, err = exec.LookPath("python3"); err != nil {
			return torchPeer{}, fmt.Errorf("%w: no python3 on PATH (M2N_PYTHON names another)", errNoPeer)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	check := exec.CommandContext(ctx, py, "-c", "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 3)")
	if out, err := check.CombinedOutput(); err != nil {
		why := "python3 has no torch"
		if ee := (*exec.ExitError)(nil); errors.As(err, &ee) && ee.ExitCode() == 3 {
			why = "torch sees no CUDA device"
		}
		return torchPeer{}, fmt.Errorf("%w: %s (%v: %s)", errNoPeer, why, err, bytes.TrimSpace(lastLine(out)))
	}
	f, err := os.CreateTemp("", "m2n-torch-peer-*.py")
	if err != nil {
		return torchPeer{}, err
	}
	defer os.Remove(f.Name())
	if _, err := f.Write(script); err != nil {
		f.Close()
		return torchPeer{}, err
	}
	if err := f.Close(); err != nil {
		return torchPeer{}, err
	}
	out, err := exec.CommandContext(ctx, py, f.Name(), strconv.FormatInt(rows, 10), strconv.FormatInt(cols, 10)).CombinedOutput()
	p := torchPeer{Output: string(out)}
	if err != nil {
		return p, fmt.Errorf("perf: torch peer: %v: %s", err, bytes.TrimSpace(lastLine(out)))
	}
	for _, m := range peerLine.FindAllStringSubmatch(p.Output, -1) {
		us, err := strconv.ParseFloat(m[2], 64)
		if err != nil {
			continue
		}
		d := time.Duration(us * float64(time.Microsecond))
		switch m[1] {
		case "copy_ of the bf16 bytes":
			p.Copy = d
		case "eager block quantize":
			p.Eager = d
		default:
			p.Compile = d
			if s := regexp.MustCompile(`same bytes as eager: (\w+)`).FindStringSubmatch(m[3]); s != nil {
				p.SameAsEager = s[1]
			}
		}
	}
	if p.Eager == 0 {
		return p, fmt.Errorf("perf: torch peer: no eager figure in its output: %s", bytes.TrimSpace(lastLine(out)))
	}
	return p, nil
}

func lastLine(b []byte) []byte {
	b = bytes.TrimRight(b, "\n")
	if i := bytes.LastIndexByte(b, '\n'); i >= 0 {
		return b[i+1:]
	}
	return b
}

// WriteTorchPeer runs the torch peer script (bench/peers/torch_fp8_block.py)
// over n bytes of bf16 in rows of 64 KiB, as quant-bench measured the
// stages res, and writes its figures and the ratio of torch.compile's
// time to each stage's at every row width (above 1: m2n is faster), or
// why it could not run.
func WriteTorchPeer(out io.Writer, script []byte, n int64, res []QuantResult) {
	const cols = 32768 // 64 KiB rows, as the issue measured
	if n%(2*cols*128) != 0 {
		fmt.Fprintf(out, "torch peer: not run: %s is not a whole number of 128 rows of 64 KiB\n", units.FormatBytes(n))
		return
	}
	p, err := runTorchPeer(script, n/(2*cols), cols, 10*time.Minute)
	if err != nil {
		fmt.Fprintf(out, "torch peer: could not run it: %v\n", err)
		return
	}
	fmt.Fprint(out, p.Output)
	if p.Compile == 0 {
		fmt.Fprintln(out, "torch peer: no torch.compile figure, so no ratio")
		return
	}
	for _, r := range res {
		if strings.HasPrefix(r.Op, "stage-") {
			fmt.Fprintf(out, "%8d  %-16s  torch.compile / m2n = %.2fx (%s against %s)\n",
				r.RowBytes, r.Op, p.Compile.Seconds()/r.Median.Seconds(), p.Compile.Round(time.Microsecond/10), r.Median.Round(time.Microsecond/10))
		}
	}
}
