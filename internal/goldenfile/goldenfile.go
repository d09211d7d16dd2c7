// Package goldenfile compares test output with golden files and rewrites
// them when the test binary runs with -update (go test ./pkg -update).
// Every test package of the project uses it, so the flag is defined once.
package goldenfile

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files (testdata/*) from the current output")

// Update reports whether the test binary runs with -update.
func Update() bool { return *update }

// Check compares got with the file at path (relative to the test's package
// directory, e.g. "testdata/table.golden"); with -update it writes got there
// instead, creating the directory.
func Check(t testing.TB, path string, got []byte) {
	t.Helper()
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run the test with -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("output differs from %s (run the test with -update to accept it):\n--- got\n%s\n--- want\n%s", path, got, want)
	}
}
