package session

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// portFile is what a listening trainer publishes for generators that
// connect to it: the MPI port's name, the random job token a connector
// must present, and enough about the listener to tell a stale file from a
// live one. It is JSON, written atomically (a temporary file renamed over
// it) and readable by its owner only.
type portFile struct {
	Version int    `json:"m2n_port_file"`
	Port    string `json:"port"`
	Token   string `json:"token"`
	Host    string `json:"host"`
	PID     int    `json:"pid"`
	Ranks   int    `json:"ranks"`   // the trainer's
	State   string `json:"state"`   // accepting, or busy (a generator is joined)
	Written string `json:"written"` // RFC 3339
}

const (
	portFileVersion = 1
	stateAccepting  = "accepting"
	stateBusy       = "busy"
	tokenBytes      = 32
)

// newToken returns a random job token (hex).
func newToken() (string, error) {
	b := make([]byte, tokenBytes)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("making the job token: %w", err)
	}
	return hex.EncodeToString(b), nil
}

// write publishes pf at path: a temporary file of mode 0600 in the same
// directory, renamed over path, so that a reader sees the old file or the
// new one and nobody else ever sees the token.
func (pf portFile) write(path string) error {
	pf.Version = portFileVersion
	pf.Written = time.Now().UTC().Format(time.RFC3339Nano)
	data, err := json.Marshal(pf)
	if err != nil {
		return err
	}
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp*") // mode 0600
	if err != nil {
		return fmt.Errorf("writing the port file %s: %w", path, err)
	}
	_, werr := tmp.Write(append(data, '\n'))
	if err := errors.Join(werr, tmp.Chmod(0o600), tmp.Sync(), tmp.Close()); err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("writing the port file %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("writing the port file %s: %w", path, err)
	}
	return nil
}

// readPortFile reads and checks the port file at path for a connector:
// it must exist, belong to this user and be readable by nobody else, and
// name a listener that is accepting and, where it runs on this host,
// alive. Each refusal names the file and the cause.
func readPortFile(path string) (portFile, error) {
	var pf portFile
	st, err := os.Stat(path)
	if errors.Is(err, os.ErrNotExist) {
		return pf, fmt.Errorf("port file %s does not exist: is the trainer listening on it (session.Listen, refit --listen %s)?", path, path)
	}
	if err != nil {
		return pf, fmt.Errorf("port file %s: %w", path, err)
	}
	if sys, ok := st.Sys().(*syscall.Stat_t); ok && int(sys.Uid) != os.Getuid() {
		return pf, fmt.Errorf("port file %s belongs to user %d, not to this user (%d): only a trainer of the same user may be joined", path, sys.Uid, os.Getuid())
	}
	if st.Mode().Perm()&0o077 != 0 {
		return pf, fmt.Errorf("port file %s has mode %v: a port file readable by others is refused (its token lets anyone join), want 0600", path, st.Mode().Perm())
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return pf, fmt.Errorf("port file %s: %w", path, err)
	}
	if err := json.Unmarshal(data, &pf); err != nil || pf.Version != portFileVersion || pf.Port == "" || pf.Token == "" {
		return pf, fmt.Errorf("port file %s is not an m2n port file of version %d (%d bytes)", path, portFileVersion, len(data))
	}
	if host, _ := os.Hostname(); host == pf.Host && pf.PID > 0 && !alive(pf.PID) {
		return pf, fmt.Errorf("stale port file %s: the trainer that wrote it (pid %d on %s, at %s) is gone", path, pf.PID, pf.Host, pf.Written)
	}
	if pf.State != stateAccepting {
		return pf, fmt.Errorf("the trainer of port file %s (pid %d on %s) is busy: a generator is joined to its session since %s; join when it leaves", path, pf.PID, pf.Host, pf.Written)
	}
	return pf, nil
}

// alive reports whether a process of this host with that pid exists.
func alive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}
