package dl_test

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/m2n-dev/m2n/internal/dl"
	"github.com/m2n-dev/m2n/internal/dl/dltest"
)

const env = "M2N_DL_TEST_PATH"

// libm is glibc's math library, which every machine that builds m2n has.
func libm(t *testing.T) *dl.Library {
	t.Helper()
	lib, err := dl.Open(dl.Spec{Name: "libm.so.6", Env: env,
		Candidates: []string{"/nonexistent/libm.so.6", "libm.so.6"}})
	if err != nil {
		t.Fatal(err)
	}
	return lib
}

func TestOpenAndResolve(t *testing.T) {
	lib := libm(t)
	if lib.Path != "libm.so.6" || !filepath.IsAbs(lib.File) || lib.Name != "libm.so.6" {
		t.Errorf("Library = %+v; want Path libm.so.6 and an absolute File", lib)
	}
	if err := lib.Resolve(dltest.Good()); err != nil {
		t.Fatal(err)
	}
	if y, ok := dltest.Cos(0); !ok || y != 1 {
		t.Errorf("cos(0) = %v, %v; want 1, true", y, ok)
	}
	if y, ok := dltest.Sin(0); !ok || y != 0 {
		t.Errorf("sin(0) through its second name = %v, %v; want 0, true", y, ok)
	}
	if dltest.OptionalSet() {
		t.Errorf("an optional symbol libm lacks got an address")
	}
	if err := lib.Resolve(dltest.Ext()); err != nil {
		t.Fatal(err)
	}
	if y, ok := dltest.Floor(1.5); !ok || y != 1 {
		t.Errorf("floor(1.5) from rows with extra fields = %v, %v; want 1, true", y, ok)
	}
	if y, ok := dltest.Ceil(1.5); !ok || y != 2 {
		t.Errorf("ceil(1.5) from rows with extra fields = %v, %v; want 2, true", y, ok)
	}
}

func TestMissingSymbols(t *testing.T) {
	lib := libm(t)
	err := lib.Resolve(dltest.Bad())
	var e *dl.Error
	if !errors.As(err, &e) {
		t.Fatalf("Resolve of a table with missing symbols: %v, want *dl.Error", err)
	}
	if errors.Is(err, dl.ErrNotFound) {
		t.Errorf("missing symbols match ErrNotFound: %v", err)
	}
	if want := []string{"m2n_dltest_missing_a", "m2n_dltest_missing_b"}; !slices.Equal(e.Symbols, want) || e.File != lib.File {
		t.Errorf("Error = %+v; want Symbols %v in %s", e, want, lib.File)
	}
	want := lib.File + " (libm.so.6) lacks symbols m2n_dltest_missing_a, m2n_dltest_missing_b"
	if err.Error() != want {
		t.Errorf("message %q\nwant      %q", err, want)
	}
	if dltest.BadCosSet() {
		t.Errorf("a failed Resolve left a slot filled")
	}
	if err := lib.Resolve(dltest.Good()); err == nil {
		t.Errorf("Resolve after a failed Resolve succeeded")
	}
}

func TestNotFound(t *testing.T) {
	t.Setenv(env, "")
	s := dl.Spec{Name: "libm2n-none", Env: env,
		Candidates: []string{"libm2n-none.so.1", "/nonexistent/libm2n-none.so"}}
	if got := s.Paths(); !slices.Equal(got, s.Candidates) {
		t.Errorf("Paths = %v, want %v", got, s.Candidates)
	}
	_, err := dl.Open(s)
	var e *dl.Error
	if !errors.Is(err, dl.ErrNotFound) || !errors.As(err, &e) || len(e.Tried) != 2 || e.FromEnv {
		t.Fatalf("Open of a library that is nowhere: %#v", err)
	}
	msg := err.Error()
	want := "libm2n-none not found: tried libm2n-none.so.1, /nonexistent/libm2n-none.so: " +
		"cannot open shared object file: No such file or directory (set " + env + " to the library's file)"
	if msg != want {
		t.Errorf("message %q\nwant      %q", msg, want)
	}

	// A file that is there but is no library has a reason of its own.
	notLib := filepath.Join(t.TempDir(), "libm2n-text.so")
	if err := os.WriteFile(notLib, []byte("not ELF"), 0o644); err != nil {
		t.Fatal(err)
	}
	s.Candidates = append(s.Candidates, notLib)
	_, err = dl.Open(s)
	msg = err.Error()
	if !strings.Contains(msg, "/nonexistent/libm2n-none.so: cannot open shared object file: No such file or directory; "+notLib+": ") ||
		!strings.Contains(msg, "too short") && !strings.Contains(msg, "invalid ELF") {
		t.Errorf("message %q does not give the text file its own reason", msg)
	}
}

func TestEnvOverride(t *testing.T) {
	s := dl.Spec{Name: "libm.so.6", Env: env, Candidates: []string{"libm.so.6"}}
	t.Setenv(env, "/nonexistent/libm.so.6")
	if got := s.Paths(); !slices.Equal(got, []string{"/nonexistent/libm.so.6"}) {
		t.Errorf("Paths with %s set = %v", env, got)
	}
	_, err := dl.Open(s)
	var e *dl.Error
	if !errors.Is(err, dl.ErrNotFound) || !errors.As(err, &e) || !e.FromEnv {
		t.Fatalf("Open of a missing override: %v", err)
	}
	if want := "libm.so.6 not found: " + env + "=/nonexistent/libm.so.6: /nonexistent/libm.so.6: "; !strings.HasPrefix(err.Error(), want) {
		t.Errorf("message %q\nwant prefix %q", err, want)
	}
	t.Setenv(env, "")
	file := libm(t).File
	t.Setenv(env, file)
	lib, err := dl.Open(s)
	if err != nil || lib.Path != file {
		t.Errorf("Open with %s=%s: %+v, %v", env, file, lib, err)
	}
}
