// Package cpuprof starts a CPU profile for a command's --cpuprofile flag
// (refit sim, refit replay-bench): one place that creates the file, starts
// the profile and, when the command is done, stops it and closes the file.
package cpuprof

import (
	"errors"
	"os"
	"runtime/pprof"
)

// Start creates path and starts a CPU profile into it. stop ends the
// profile and closes the file (go tool pprof reads it); it returns the
// error of the close, where the profile's last bytes are written. An
// empty path (the flag not given) starts nothing, and stop does nothing.
func Start(path string) (stop func() error, err error) {
	if path == "" {
		return func() error { return nil }, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		return nil, errors.Join(err, f.Close())
	}
	return func() error {
		pprof.StopCPUProfile()
		return f.Close()
	}, nil
}
