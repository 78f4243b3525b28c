package session

import (
	"context"
	"encoding/binary"
	"os"
	"strings"

	"github.com/m2n-dev/m2n/control"
	"github.com/m2n-dev/m2n/mpi"
)

// stderr is where the watchdog says why it ends a job.
var stderr = os.Stderr

// hostIDs names each rank's host by the lowest rank of comm on it (MPI's
// shared-memory split). It makes blocking collective calls; the caller
// guards it.
func hostIDs(comm *mpi.Comm) ([]int, error) {
	local, err := comm.SplitShared(0)
	if err != nil {
		return nil, err
	}
	defer local.Free()
	leader := binary.LittleEndian.AppendUint64(nil, uint64(comm.Rank()))
	if err := local.Bcast(leader, 0); err != nil {
		return nil, err
	}
	all := make([]byte, 8*comm.Size())
	if err := comm.Allgather(leader, all); err != nil {
		return nil, err
	}
	host := make([]int, comm.Size())
	for i := range host {
		host[i] = int(binary.LittleEndian.Uint64(all[8*i:]))
	}
	return host, nil
}

// hostsByName names each rank's host by the lowest rank whose host has
// the same name (os.Hostname), gathered over the control plane: the
// hosts of a session over two jobs' merged communicator, where MPI's
// shared-memory split would make a communicator that spans both jobs
// (about 100 ms with OpenMPI 4.1). Ranks whose host has no name, or a
// name longer than the exchange holds, are each a host of their own.
func hostsByName(ctl *mpiControl) ([]int, error) {
	const width = 256
	b := make([]byte, width)
	if name, err := os.Hostname(); err == nil && len(name) < width {
		copy(b, name)
	}
	all := make([]byte, width*ctl.size)
	if err := ctl.Allgather(control.WithPhase(context.Background(), "session set-up (host names)"), b, all); err != nil {
		return nil, err
	}
	first := map[string]int{}
	host := make([]int, ctl.size)
	for r := range host {
		name := strings.TrimRight(string(all[r*width:(r+1)*width]), "\x00")
		if name == "" {
			host[r] = r
			continue
		}
		if _, ok := first[name]; !ok {
			first[name] = r
		}
		host[r] = first[name]
	}
	return host, nil
}

// domainIDs numbers each rank's domain by the device's key (a GPU's NVLink
// domain), when every rank has one; else it keeps the hosts.
func (s *Session) domainIDs(key string) ([]int, error) {
	const width = 256
	b := make([]byte, width)
	copy(b, key)
	all := make([]byte, width*s.size)
	if err := s.ctl.Allgather(context.Background(), b, all); err != nil {
		return nil, err
	}
	ids := map[string]int{}
	out := make([]int, s.size)
	for r := range out {
		k := strings.TrimRight(string(all[r*width:(r+1)*width]), "\x00")
		if k == "" {
			return s.hosts, nil
		}
		if _, ok := ids[k]; !ok {
			ids[k] = len(ids)
		}
		out[r] = ids[k]
	}
	return out, nil
}
