package dl

/*
#cgo LDFLAGS: -ldl
#define _GNU_SOURCE
#include <dlfcn.h>
#include <link.h>
#include <stdio.h>
#include <stdlib.h>

#include "dl.h"

// m2n_dl_open is dlopen with the loader's message in err on failure; dlerror
// is per thread, so it is read in the same C call.
static void *m2n_dl_open(const char *path, int global, char *err, size_t errlen) {
	dlerror();
	void *h = dlopen(path, RTLD_NOW | (global ? RTLD_GLOBAL : RTLD_LOCAL));
	if (h == NULL) {
		const char *e = dlerror();
		snprintf(err, errlen, "%s", e != NULL ? e : "dlopen failed");
	}
	return h;
}

// m2n_dl_file is the name the loader mapped h from (an absolute path after a
// search), or NULL.
static const char *m2n_dl_file(void *h) {
	struct link_map *m = NULL;
	if (dlinfo(h, RTLD_DI_LINKMAP, &m) != 0 || m == NULL || m->l_name == NULL || m->l_name[0] == 0) {
		return NULL;
	}
	return m->l_name;
}

static m2n_dl_sym *m2n_dl_row(const m2n_dl_table *t, size_t i) {
	return (m2n_dl_sym *)((char *)t->rows + i * t->stride);
}
*/
import "C"

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"unsafe"
)

// ErrNotFound is matched (errors.Is) by Open's error when none of the files
// it tried could be opened.
var ErrNotFound = errors.New("library not found")

// Spec says which library to open and where to look for it.
type Spec struct {
	// Name is the library as messages call it, such as "libcuda.so.1".
	Name string
	// Env names a variable ("M2N_CUDA_PATH") whose value, when set and not
	// empty, is the one file to open instead of Candidates.
	Env string
	// Candidates are the files to try, in order. A name without a slash
	// goes through the dynamic loader's search (LD_LIBRARY_PATH, the ld.so
	// cache, the system directories); a path is opened as it is.
	Candidates []string
	// Global opens the library with RTLD_GLOBAL, so that libraries opened
	// later resolve their undefined symbols against it; by default it is
	// RTLD_LOCAL.
	Global bool
}

// Paths returns the files Open tries, in order: the value of s.Env alone if
// it is set and not empty, else s.Candidates.
func (s Spec) Paths() []string {
	if p := s.override(); p != "" {
		return []string{p}
	}
	return append([]string(nil), s.Candidates...)
}

func (s Spec) override() string {
	if s.Env == "" {
		return ""
	}
	return os.Getenv(s.Env)
}

// Library is a shared library that Open opened. It stays open for the life
// of the process, unless Resolve fails.
type Library struct {
	// Name is Spec.Name.
	Name string
	// Path is the file of Spec.Paths that opened.
	Path string
	// File is the file the dynamic loader mapped: an absolute path when
	// Path was found by a search, else Path.
	File string

	h unsafe.Pointer // the dlopen handle
}

// Open opens the first of s.Paths() that the dynamic loader accepts, with
// RTLD_NOW (every undefined symbol of the library is bound at once). When
// none opens, the error is an *Error that matches ErrNotFound and lists
// each file tried with the loader's reason.
func Open(s Spec) (*Library, error) {
	e := &Error{Library: s.Name, Env: s.Env}
	if s.override() != "" {
		e.FromEnv = true
	}
	global := C.int(0)
	if s.Global {
		global = 1
	}
	for _, p := range s.Paths() {
		cp := C.CString(p)
		var msg [1024]C.char
		h := C.m2n_dl_open(cp, global, &msg[0], C.size_t(len(msg)))
		C.free(unsafe.Pointer(cp))
		if h == nil {
			e.Tried = append(e.Tried, Attempt{Path: p, Reason: C.GoString(&msg[0])})
			continue
		}
		l := &Library{Name: s.Name, Path: p, File: p, h: h}
		if f := C.m2n_dl_file(h); f != nil {
			l.File = C.GoString(f)
		}
		return l, nil
	}
	return nil, e
}

// Load opens the library of s for the binding pkg ("nccl") and resolves
// table in it, as every binding loads its C library: a library that is
// not found is an error wrapping unavailable (the binding's
// ErrNotAvailable, whose text starts with pkg) and ErrNotFound; any other
// failure names pkg: "nccl: not a usable libnccl.so.2: ... lacks symbol
// ...".
func Load(pkg string, s Spec, unavailable error, table unsafe.Pointer) (*Library, error) {
	lib, err := Open(s)
	if errors.Is(err, ErrNotFound) {
		return nil, fmt.Errorf("%w: %w", unavailable, err)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", pkg, err)
	}
	if err := lib.Resolve(table); err != nil {
		return nil, fmt.Errorf("%s: not a usable %s: %w", pkg, s.Name, err)
	}
	return lib, nil
}

// Handle returns the library's dlopen handle, for a binding's own resolver
// (CUDA's cuGetProcAddress) to use from C.
func (l *Library) Handle() unsafe.Pointer { return l.h }

// Resolve fills the slots of table, which points to a C m2n_dl_table (see
// dl.h), from the library: each row's slot that is still NULL gets the
// address of the first of the row's names the library exports. When
// required symbols are missing, Resolve clears every slot of the table,
// closes the library and returns an *Error naming the file and all the
// missing symbols; the Library is unusable after that.
func (l *Library) Resolve(table unsafe.Pointer) error {
	if l.h == nil {
		return fmt.Errorf("dl: %s: Resolve on a library closed by a failed Resolve", l.Name)
	}
	t := (*C.m2n_dl_table)(table)
	var missing []string
	for i := range int(t.n) {
		row := C.m2n_dl_row(t, C.size_t(i))
		for _, name := range row.names {
			if *row.slot != nil || name == nil {
				continue
			}
			*row.slot = C.dlsym(l.h, name)
		}
		if *row.slot == nil && row.optional == 0 {
			missing = append(missing, C.GoString(row.names[0]))
		}
	}
	if len(missing) == 0 {
		return nil
	}
	for i := range int(t.n) {
		*C.m2n_dl_row(t, C.size_t(i)).slot = nil
	}
	C.dlclose(l.h)
	l.h = nil
	return &Error{Library: l.Name, File: l.File, Symbols: missing}
}

// Attempt is a file Open tried and the dynamic loader's reason for refusing
// it.
type Attempt struct {
	Path, Reason string
}

// reason is the loader's reason without the file's name, which it usually
// starts with.
func (a Attempt) reason() string { return strings.TrimPrefix(a.Reason, a.Path+": ") }

// Error is a library that could not be used: none of its files opened
// (Tried is set, and the error matches ErrNotFound), or the file that opened
// lacks required symbols (File and Symbols are set).
type Error struct {
	Library string    // Spec.Name
	Env     string    // Spec.Env, the variable that overrides the candidates
	FromEnv bool      // the one file tried came from Env
	Tried   []Attempt // the files tried, in order
	File    string    // the file that opened
	Symbols []string  // the required symbols File lacks, in table order
}

// Error reads, for example,
//
//	libcuda.so.1 not found: tried libcuda.so.1: cannot open shared object file: No such file or directory (set M2N_CUDA_PATH to the library's file)
//	libnvrtc not found: tried libnvrtc.so.13, libnvrtc.so.12, /usr/local/cuda/lib64/libnvrtc.so.13: cannot open shared object file: No such file or directory; /opt/libnvrtc.so.13: wrong ELF class: ELFCLASS32 (set M2N_NVRTC_PATH to the library's file)
//	libcuda.so.1 not found: M2N_CUDA_PATH=/opt/libcuda.so: /opt/libcuda.so: cannot open shared object file: No such file or directory
//	/usr/lib/x86_64-linux-gnu/libcuda.so.1 (libcuda.so.1) lacks symbol cuMemAlloc_v2
//	/usr/lib/x86_64-linux-gnu/libm.so.6 (libcuda.so.1) lacks symbols cuInit, cuGetErrorName, cuGetErrorString, cuDriverGetVersion and 41 more
//
// Symbols keeps the whole list.
func (e *Error) Error() string {
	if len(e.Symbols) > 0 {
		if len(e.Symbols) == 1 {
			return fmt.Sprintf("%s (%s) lacks symbol %s", e.File, e.Library, e.Symbols[0])
		}
		const show = 4 // a file that is not the library at all lacks them all
		list := strings.Join(e.Symbols[:min(show, len(e.Symbols))], ", ")
		if len(e.Symbols) > show {
			list += fmt.Sprintf(" and %d more", len(e.Symbols)-show)
		}
		return fmt.Sprintf("%s (%s) lacks symbols %s", e.File, e.Library, list)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s not found: ", e.Library)
	if e.FromEnv && len(e.Tried) == 1 {
		a := e.Tried[0]
		fmt.Fprintf(&b, "%s=%s: %s", e.Env, a.Path, a.Reason)
		return b.String()
	}
	if len(e.Tried) == 0 {
		b.WriteString("no file to try")
	} else {
		b.WriteString("tried ")
	}
	// Files refused for the same reason (usually: not there) share it.
	for i := 0; i < len(e.Tried); {
		if i > 0 {
			b.WriteString("; ")
		}
		reason := e.Tried[i].reason()
		j := i
		for ; j < len(e.Tried) && e.Tried[j].reason() == reason; j++ {
			if j > i {
				b.WriteString(", ")
			}
			b.WriteString(e.Tried[j].Path)
		}
		b.WriteString(": " + reason)
		i = j
	}
	if e.Env != "" {
		fmt.Fprintf(&b, " (set %s to the library's file)", e.Env)
	}
	return b.String()
}

// Is reports whether target is ErrNotFound and no file opened.
func (e *Error) Is(target error) bool {
	return target == ErrNotFound && len(e.Symbols) == 0
}
