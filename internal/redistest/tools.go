package redistest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// RequireToolsEnv names the environment variable under which a test that
// needs a missing tool (redis-server, redis-cli, redis-benchmark,
// memtier_benchmark, prometheus, chromium, redis-py) fails instead of
// skipping. .ci/test sets it once .ci/setup has installed them, so that a
// passing run skipped nothing for a missing tool; CI set does the same.
const RequireToolsEnv = "RESPMETER_REQUIRE_TOOLS"

// SkipMissingTool skips t, saying why, or fails it when RequireToolsEnv
// or CI is set.
func SkipMissingTool(t testing.TB, why string) {
	t.Helper()
	if os.Getenv(RequireToolsEnv) != "" || os.Getenv("CI") != "" {
		t.Fatalf("%s (%s or CI is set: .ci/setup installs it)", why, RequireToolsEnv)
	}
	t.Skip(why)
}

// Tool returns the path of the program name from PATH, or skips t when
// there is none (failing it under RequireToolsEnv, see SkipMissingTool).
func Tool(t testing.TB, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		SkipMissingTool(t, fmt.Sprintf("%s not in PATH: %v", name, err))
	}
	return p
}

// MemtierVersion is the memtier_benchmark release .ci/build-memtier.sh
// builds and caches.
const MemtierVersion = "2.3.0"

// FindMemtier returns the memtier_benchmark to run: $RESPMETER_MEMTIER,
// else the one .ci/build-memtier.sh caches (under /var/cache/respmeter/tools
// or the user's cache directory), else memtier_benchmark on PATH; or "" and
// why.
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
	return "", "memtier_benchmark not found: build it with .ci/build-memtier.sh, or set RESPMETER_MEMTIER"
}

// Memtier returns FindMemtier's memtier_benchmark, or skips t with its
// message (failing t under RequireToolsEnv, see SkipMissingTool).
func Memtier(t testing.TB) string {
	t.Helper()
	p, msg := FindMemtier(t)
	if p == "" {
		SkipMissingTool(t, msg)
	}
	return p
}
