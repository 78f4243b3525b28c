package session

import (
	"context"
	"encoding/binary"
	"os"
	"strings"

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
