package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestVersionStampedAsDockerfile builds respmeter with the -ldflags of the
// Dockerfile's go build line, its VERSION and COMMIT build arguments
// filled in (docker itself does not run here), and runs "respmeter
// version": it prints them instead of "(devel)". Without -trimpath, so
// that the build reuses the test's compiled packages and only links.
func TestVersionStampedAsDockerfile(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go toolchain on PATH")
	}
	df, err := os.ReadFile("../../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^RUN .*go build .*-ldflags "([^"]*)"`).FindSubmatch(df)
	if m == nil {
		t.Fatal(`no go build -ldflags "..." line in the Dockerfile`)
	}
	const ver, commit = "v9.8.7-stamp", "0123456789abcdef0123456789abcdef01234567"
	ldflags := strings.NewReplacer("${VERSION}", ver, "${COMMIT}", commit).Replace(string(m[1]))
	if !strings.Contains(ldflags, ver) || !strings.Contains(ldflags, commit) {
		t.Fatalf("the Dockerfile's -ldflags %q do not use ${VERSION} and ${COMMIT}", m[1])
	}
	bin := filepath.Join(t.TempDir(), "respmeter")
	build := exec.Command(goBin, "build", "-ldflags", ldflags, "-o", bin, ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build -ldflags %q: %v\n%s", ldflags, err, out)
	}
	out, err := exec.Command(bin, "version").Output()
	if err != nil {
		t.Fatal(err)
	}
	if want := regexp.MustCompile(`^respmeter ` + regexp.QuoteMeta(ver) + ` go1\.\S+ \w+/\w+ commit 0123456789ab\n$`); !want.Match(out) {
		t.Errorf("respmeter version = %q, want %s", out, want)
	}
}
