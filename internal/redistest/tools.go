package redistest

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// MemtierVersion is the memtier_benchmark release .ci/build-memtier.sh
// builds and caches.
const MemtierVersion = "2.3.0"

// FindMemtier returns the memtier_benchmark to run: $RESPMETER_MEMTIER,
// else the one .ci/build-memtier.sh caches (under /var/cache/respmeter/tools
// or the user's cache directory), else memtier_benchmark on PATH; or "" and
// why. Under CI (CI set) a missing one fails t, since .ci/run builds it,
// unless .ci/run found no source to build it from (RESPMETER_MEMTIER_SKIP).
func FindMemtier(t testing.TB) (path, why string) {
	t.Helper()
	sub := filepath.Join("respmeter/tools", "memtier_benchmark-"+MemtierVersion, "memtier_benchmark")
	cands := []string{os.Getenv("RESPMETER_MEMTIER"), filepath.Join("/var/cache", sub)}
	if dir, err := os.UserCacheDir(); err == nil {
		cands = append(cands, filepath.Join(dir, sub))
	}
	if p, err := exec.LookPath("memtier_benchmark"); err == nil {
		cands = append(cands, p)
	}
	for _, c := range cands {
		if c == "" {
			continue
		}
		if fi, err := os.Stat(c); err == nil && fi.Mode()&0o111 != 0 {
			return c, ""
		}
	}
	msg := "memtier_benchmark not found: build it with .ci/build-memtier.sh, or set RESPMETER_MEMTIER"
	if os.Getenv("CI") != "" && os.Getenv("RESPMETER_MEMTIER_SKIP") == "" {
		t.Fatal(msg + " (CI: .ci/run builds it)")
	}
	return "", msg
}

// Memtier returns FindMemtier's memtier_benchmark, or skips t with its
// message (failing t under CI, as FindMemtier says).
func Memtier(t testing.TB) string {
	t.Helper()
	p, msg := FindMemtier(t)
	if p == "" {
		t.Skip(msg)
	}
	return p
}
