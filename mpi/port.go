package mpi

/*
#include <stdlib.h>
#include <string.h>
#include "cmpi.h"

// MPI_INFO_NULL is a macro (the address of a global in OpenMPI): cgo sees
// these wrappers instead. Port names are at most MPI_MAX_PORT_NAME bytes
// with the terminating NUL.
static inline int m2n_max_port_name(void) { return MPI_MAX_PORT_NAME; }
static inline int m2n_open_port(char *name) { return MPI_Open_port(MPI_INFO_NULL, name); }
static inline int m2n_close_port(const char *name) { return MPI_Close_port(name); }
static inline int m2n_accept(const char *port, int root, MPI_Comm c, MPI_Comm *out) {
	return MPI_Comm_accept(port, MPI_INFO_NULL, root, c, out);
}
static inline int m2n_connect(const char *port, int root, MPI_Comm c, MPI_Comm *out) {
	return MPI_Comm_connect(port, MPI_INFO_NULL, root, c, out);
}
*/
import "C"

import "unsafe"

// OpenPort opens a port on which this process can accept connections from
// other MPI jobs (MPI_Open_port) and returns its name, which a connecting
// job passes to Connect. The name is a capability: any process that reads
// it may connect, so a program hands it out only where it trusts the
// readers. ClosePort releases it.
//
// With OpenMPI 4.1, connecting two jobs started by separate mpirun
// invocations needs an ompi-server that both mpiruns were pointed at
// (mpirun --ompi-server file:URI) and a transport that reaches across
// jobs (the tcp BTL; vader alone cannot: "BTLs attempted: vader self"),
// otherwise Connect and Accept fail (or abort) naming ompi-server.
func OpenPort() (string, error) {
	buf := (*C.char)(C.malloc(C.size_t(C.m2n_max_port_name())))
	defer C.free(unsafe.Pointer(buf))
	C.memset(unsafe.Pointer(buf), 0, C.size_t(C.m2n_max_port_name()))
	if err := check("MPI_Open_port", C.m2n_open_port(buf)); err != nil {
		return "", err
	}
	return C.GoString(buf), nil
}

// ClosePort releases a port from OpenPort (MPI_Close_port). It does not
// interrupt an Accept waiting on the port: OpenMPI 4.1 leaves such an
// Accept blocked.
func ClosePort(name string) error {
	if err := portArg("MPI_Close_port", name); err != nil {
		return err
	}
	cs := C.CString(name)
	defer C.free(unsafe.Pointer(cs))
	return check("MPI_Close_port", C.m2n_close_port(cs))
}

// portArg checks a port name for the root of Accept and Connect.
func portArg(op, name string) error {
	if name == "" {
		return invalid(op, "empty port name")
	}
	if len(name) >= int(C.m2n_max_port_name()) {
		return invalid(op, "port name of %d bytes, want fewer than MPI_MAX_PORT_NAME (%d)", len(name), int(C.m2n_max_port_name()))
	}
	return nil
}

// Accept waits for a job to Connect to port and returns the
// intercommunicator between c's ranks (its local group) and the
// connecting job's (its remote group): MPI_Comm_accept, collective over c.
// Only root's port matters; the other ranks may pass "". MPI offers no way
// to bound or cancel the wait: a caller that must bound it runs Accept in
// a goroutine and, on giving up, treats MPI as unusable (MarkFailed).
func (c *Comm) Accept(port string, root int) (*Comm, error) {
	return c.portCall("MPI_Comm_accept", port, root, func(p *C.char, h C.MPI_Comm, out *C.MPI_Comm) C.int {
		return C.m2n_accept(p, C.int(root), h, out)
	})
}

// Connect joins the job that accepts on port and returns the
// intercommunicator between c's ranks (local) and the accepting job's
// ranks (remote): MPI_Comm_connect, collective over c. Only root's port
// matters. A port whose job is gone leaves OpenMPI 4.1 waiting for good:
// bound the call as for Accept.
func (c *Comm) Connect(port string, root int) (*Comm, error) {
	return c.portCall("MPI_Comm_connect", port, root, func(p *C.char, h C.MPI_Comm, out *C.MPI_Comm) C.int {
		return C.m2n_connect(p, C.int(root), h, out)
	})
}

func (c *Comm) portCall(op, port string, root int, call func(*C.char, C.MPI_Comm, *C.MPI_Comm) C.int) (*Comm, error) {
	h, err := c.handle(op)
	if err != nil {
		return nil, err
	}
	if root < 0 || root >= c.Size() {
		return nil, invalid(op, "root %d, want a rank of the %d-rank communicator", root, c.Size())
	}
	if c.Rank() == root {
		if err := portArg(op, port); err != nil {
			return nil, err
		}
	}
	cs := C.CString(port)
	defer C.free(unsafe.Pointer(cs))
	var out C.MPI_Comm
	if err := check(op, call(cs, h, &out)); err != nil {
		return nil, err
	}
	ic, err := newComm(out)
	if err == nil && ic == nil {
		err = invalid(op, "MPI returned MPI_COMM_NULL")
	}
	return ic, err
}

// remoteSize returns the size of an intercommunicator's remote group
// (MPI_Comm_remote_size).
func (c *Comm) remoteSize() (int, error) {
	h, err := c.handle("MPI_Comm_remote_size")
	if err != nil {
		return 0, err
	}
	var n C.int
	if err := check("MPI_Comm_remote_size", C.MPI_Comm_remote_size(h, &n)); err != nil {
		return 0, err
	}
	return int(n), nil
}

// Merge makes an intracommunicator of both groups of the
// intercommunicator c (MPI_Intercomm_merge), collective over both: the
// group whose ranks pass high false comes first (ties: MPI picks). The
// result is freed with Free; c itself is still to be Disconnected.
func (c *Comm) Merge(high bool) (*Comm, error) {
	h, err := c.handle("MPI_Intercomm_merge")
	if err != nil {
		return nil, err
	}
	hi := C.int(0)
	if high {
		hi = 1
	}
	var out C.MPI_Comm
	if err := check("MPI_Intercomm_merge", C.MPI_Intercomm_merge(h, hi, &out)); err != nil {
		return nil, err
	}
	return newComm(out)
}

// Disconnect ends the connection of an intercommunicator from Accept or
// Connect (MPI_Comm_disconnect): collective over both groups, it waits
// for the communicator's pending messages to complete, so cancel pending
// receives first. Afterwards c is freed as by Free.
func (c *Comm) Disconnect() error {
	if c == nil {
		return nil
	}
	if c.borrowed {
		return invalid("MPI_Comm_disconnect", "the communicator is borrowed: its owner disconnects it")
	}
	h, err := c.handle("MPI_Comm_disconnect")
	if err != nil {
		return err
	}
	if err := check("MPI_Comm_disconnect", C.MPI_Comm_disconnect(&h)); err != nil {
		return err
	}
	c.h = C.m2n_comm_null()
	live.comms.Add(-1)
	return nil
}
