package nvrtc

// #include <stdlib.h>
// #include "shim.h"
import "C"

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"unsafe"

	"github.com/m2n-dev/m2n/internal/dl"
)

// ErrNotAvailable reports that no NVRTC library could be opened; Load's error
// wraps it with what was tried.
var ErrNotAvailable = errors.New("nvrtc: not available")

// Error is a failed NVRTC call. Op names the entry point, Code is its
// nvrtcResult and Msg NVRTC's text for it; Log holds the compiler's output
// when compiling failed.
type Error struct {
	Op   string
	Code int
	Msg  string
	Log  string
}

func (e *Error) Error() string {
	s := fmt.Sprintf("nvrtc: %s: %s", e.Op, e.Msg)
	if e.Log != "" {
		s += "\n" + e.Log
	}
	return s
}

func check(op string, r C.nvrtcResult) error {
	if r == 0 {
		return nil
	}
	return &Error{Op: op, Code: int(r), Msg: C.GoString(C.m2n_nvrtcGetErrorString(r))}
}

// Candidates returns the files Load tries, in order: M2N_NVRTC_PATH alone if
// it is set; else the sonames for the dynamic loader's search, then the
// toolkit's usual places ($CUDA_HOME, /usr/local/cuda, versioned toolkits).
func Candidates() []string { return spec().Paths() }

// spec is the library Load opens.
func spec() dl.Spec {
	names := []string{"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"}
	c := append([]string(nil), names...)
	var dirs []string
	for _, env := range []string{"CUDA_HOME", "CUDA_PATH"} {
		if h := os.Getenv(env); h != "" {
			dirs = append(dirs, filepath.Join(h, "lib64"), filepath.Join(h, "lib"))
		}
	}
	dirs = append(dirs, "/usr/local/cuda/lib64", "/usr/local/cuda/targets/x86_64-linux/lib")
	versioned, _ := filepath.Glob("/usr/local/cuda-*/lib64")
	// Newest toolkit first: the glob sorts ascending.
	for i := len(versioned) - 1; i >= 0; i-- {
		dirs = append(dirs, versioned[i])
	}
	for _, d := range dirs {
		for _, n := range names {
			c = append(c, filepath.Join(d, n))
		}
	}
	return dl.Spec{Name: "libnvrtc", Env: "M2N_NVRTC_PATH", Candidates: c}
}

var load struct {
	once sync.Once
	err  error
	path string
}

// Load opens NVRTC, trying Candidates in order. It is safe to call more than
// once and from several goroutines; the first result sticks. If nothing can
// be opened the error wraps ErrNotAvailable and lists every file tried with
// the dynamic loader's reason; a library that opens but lacks an entry point
// is an error naming the file and the symbols.
//
// NVRTC loads its builtins library (libnvrtc-builtins.so.*) at the first
// compile; Load opens it from NVRTC's own directory first so that the
// directory need not be on LD_LIBRARY_PATH.
func Load() error {
	load.once.Do(func() { load.path, load.err = open() })
	return load.err
}

// Path returns the file Load opened, or "" before a successful Load.
func Path() string {
	if Load() != nil {
		return ""
	}
	return load.path
}

func open() (string, error) {
	lib, err := dl.Load("nvrtc", spec(), ErrNotAvailable, unsafe.Pointer(C.m2n_nvrtc_table()))
	if err != nil {
		return "", err
	}
	preloadBuiltins(filepath.Dir(lib.File))
	return lib.File, nil
}

// preloadBuiltins opens NVRTC's builtins library from dir, if it is there,
// for NVRTC's own dlopen of it to find; where it is not, NVRTC searches.
func preloadBuiltins(dir string) {
	matches, _ := filepath.Glob(filepath.Join(dir, "libnvrtc-builtins.so*"))
	for _, m := range matches {
		dl.Open(dl.Spec{Name: "libnvrtc-builtins", Candidates: []string{m}, Global: true})
	}
}

// Version returns NVRTC's CUDA version (13, 0 for CUDA 13.0).
func Version() (major, minor int, err error) {
	if err := Load(); err != nil {
		return 0, 0, err
	}
	var ma, mi C.int
	if err := check("nvrtcVersion", C.m2n_nvrtcVersion(&ma, &mi)); err != nil {
		return 0, 0, err
	}
	return int(ma), int(mi), nil
}

// Header is a source file that the program may #include by Name.
type Header struct {
	Name, Source string
}

// Output selects what Compile returns.
type Output int

const (
	// CUBIN is machine code for one architecture: options must name a real
	// one, --gpu-architecture=sm_90.
	CUBIN Output = iota
	// PTX is virtual code that the driver compiles when it loads it:
	// --gpu-architecture=compute_90.
	PTX
)

// Compile compiles CUDA C++ source src (named name in messages) with the
// given in-memory headers and NVRTC options, and returns the CUBIN or PTX
// image for cuModuleLoadData. If compiling fails the error is an *Error whose
// Log holds the compiler's messages.
func Compile(src, name string, headers []Header, options []string, out Output) ([]byte, error) {
	if err := Load(); err != nil {
		return nil, err
	}
	var strs []*C.char
	cstr := func(s string) *C.char {
		p := C.CString(s)
		strs = append(strs, p)
		return p
	}
	defer func() {
		for _, p := range strs {
			C.free(unsafe.Pointer(p))
		}
	}()
	// Arrays of C pointers must live in C memory.
	arr := func(ss []string) **C.char {
		if len(ss) == 0 {
			return nil
		}
		a := (**C.char)(C.malloc(C.size_t(len(ss)) * C.size_t(unsafe.Sizeof((*C.char)(nil)))))
		strs = append(strs, (*C.char)(unsafe.Pointer(a)))
		s := unsafe.Slice(a, len(ss))
		for i, x := range ss {
			s[i] = cstr(x)
		}
		return a
	}
	var hsrc, hname []string
	for _, h := range headers {
		hsrc = append(hsrc, h.Source)
		hname = append(hname, h.Name)
	}
	var prog C.nvrtcProgram
	if err := check("nvrtcCreateProgram", C.m2n_nvrtcCreateProgram(&prog, cstr(src), cstr(name),
		C.int(len(headers)), arr(hsrc), arr(hname))); err != nil {
		return nil, err
	}
	defer C.m2n_nvrtcDestroyProgram(&prog)

	if err := check("nvrtcCompileProgram", C.m2n_nvrtcCompileProgram(prog, C.int(len(options)), arr(options))); err != nil {
		err.(*Error).Log = programLog(prog)
		return nil, err
	}
	op := "nvrtcGetCUBIN"
	if out == PTX {
		op = "nvrtcGetPTX"
	}
	var n C.size_t
	r := C.m2n_nvrtcGetCUBINSize(prog, &n)
	if out == PTX {
		r = C.m2n_nvrtcGetPTXSize(prog, &n)
	}
	if err := check(op+"Size", r); err != nil {
		return nil, err
	}
	if n == 0 {
		return nil, &Error{Op: op, Msg: "empty image (does --gpu-architecture name a real sm_XY for CUBIN?)"}
	}
	buf := C.malloc(n)
	defer C.free(buf)
	if out == PTX {
		r = C.m2n_nvrtcGetPTX(prog, (*C.char)(buf))
	} else {
		r = C.m2n_nvrtcGetCUBIN(prog, (*C.char)(buf))
	}
	if err := check(op, r); err != nil {
		return nil, err
	}
	return C.GoBytes(buf, C.int(n)), nil
}

func programLog(prog C.nvrtcProgram) string {
	var n C.size_t
	if C.m2n_nvrtcGetProgramLogSize(prog, &n) != 0 || n <= 1 {
		return ""
	}
	buf := C.malloc(n)
	defer C.free(buf)
	if C.m2n_nvrtcGetProgramLog(prog, (*C.char)(buf)) != 0 {
		return ""
	}
	return strings.TrimRight(C.GoString((*C.char)(buf)), "\n\x00")
}
