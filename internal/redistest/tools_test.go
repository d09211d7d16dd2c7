package redistest

import (
	"fmt"
	"strings"
	"testing"
)

// recordTB records what SkipMissingTool asks of its test instead of
// stopping it.
type recordTB struct {
	testing.TB
	fatal, skip string
}

func (r *recordTB) Helper()                   {}
func (r *recordTB) Fatalf(f string, a ...any) { r.fatal = fmt.Sprintf(f, a...) }
func (r *recordTB) Skip(a ...any)             { r.skip = fmt.Sprint(a...) }

// TestToolMissing: a missing tool skips the test, or fails it under
// RESPMETER_REQUIRE_TOOLS or CI, naming the tool.
func TestToolMissing(t *testing.T) {
	for _, c := range []struct {
		require, ci string
		fails       bool
	}{
		{"", "", false},
		{"1", "", true},
		{"", "true", true},
	} {
		t.Setenv(RequireToolsEnv, c.require)
		t.Setenv("CI", c.ci)
		r := &recordTB{TB: t}
		if p := Tool(r, "respmeter-no-such-tool"); p != "" {
			t.Fatalf("path %q for a missing tool", p)
		}
		const why = "respmeter-no-such-tool not in PATH"
		switch {
		case c.fails && !strings.Contains(r.fatal, why):
			t.Errorf("%s=%q CI=%q: want a failure naming the tool, got fatal %q, skip %q", RequireToolsEnv, c.require, c.ci, r.fatal, r.skip)
		case !c.fails && (r.fatal != "" || !strings.Contains(r.skip, why)):
			t.Errorf("%s=%q CI=%q: want a skip naming the tool, got fatal %q, skip %q", RequireToolsEnv, c.require, c.ci, r.fatal, r.skip)
		}
	}
	if p := Tool(t, "sh"); p == "" {
		t.Error("no path for sh")
	}
}
