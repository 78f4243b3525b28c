// Package goldentest compares a test's rendered output with its golden file
// in testdata/, rewriting the file first when the test runs with -rewrite.
package goldentest

import (
	"bytes"
	"os"
	"testing"
)

// Check writes got to path when rewrite is set, then fails the test unless
// the file at path holds exactly got. what names the output in the failure
// ("plan"), and pkg is the package to rerun with -rewrite ("./reshard").
func Check(t testing.TB, path string, got []byte, rewrite bool, what, pkg string) {
	t.Helper()
	if rewrite {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test %s -run Golden -rewrite to create it)", err, pkg)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s changed; got:\n%s\nwant:\n%s", what, got, want)
	}
}
