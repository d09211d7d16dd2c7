package main

import (
	"math"
	"regexp"
	"strconv"
	"testing"
)

// The exit verdict's line and the account printed under the "where the
// time went" table (writeVerdict).
var (
	verdictLineRE = regexp.MustCompile(`(?m)^verdict: cycle \S+: client (\d+)% \| path (\d+)% \| engine (?:(\d+)%|n/a[^|]*)` +
		`(?: \| engine wait (\d+)%(?: \(run queue \d+%\))?)? \| proxy (\d+)%(?: \(loop wait (\d+)%\))? — `)
	accountRE = regexp.MustCompile(`(?m)^account per request \(ms\): think (\S+) \+ path (\S+) \+ engine (\S+) \+ wait (\S+) \+ ` +
		`proxy (\S+) \+ loop wait (\S+) = cycle (\S+)$`)
	totalsRE = regexp.MustCompile(`(?m)^Totals +\d+ +\S+ +\S+ +(\S+) +(\S+) +\S+ +(\S+) +(\S+) +(\S+)$`)
)

// checkAccount checks, in the output of a run's exit (out), that the
// verdict line's shares are recomputed within 1 point from the account
// printed under the table, and that the table's Totals row holds the same
// parts (engine, wait, path, proxy, loop wait; "-" where the row has
// none).
func checkAccount(t testing.TB, out string) {
	t.Helper()
	v := verdictLineRE.FindStringSubmatch(out)
	a := accountRE.FindStringSubmatch(out)
	if v == nil || a == nil {
		t.Fatalf("no verdict line or account:\n%s", out)
	}
	f := func(s string) float64 {
		if s == "" || s == "-" {
			return 0
		}
		x, err := strconv.ParseFloat(s, 64)
		if err != nil {
			t.Fatalf("%q: %v", s, err)
		}
		return x
	}
	think, path, eng, wait, proxy, loop, cycle := f(a[1]), f(a[2]), f(a[3]), f(a[4]), f(a[5]), f(a[6]), f(a[7])
	if sum := think + path + eng + wait + proxy + loop; math.Abs(sum-cycle) > 0.0005 {
		t.Errorf("account parts add up to %.4f ms, cycle %.4f", sum, cycle)
	}
	for _, c := range []struct {
		name  string
		share string
		part  float64
	}{
		{"client", v[1], think}, {"path", v[2], path}, {"engine", v[3], eng}, {"engine wait", v[4], wait},
		{"proxy", v[5], proxy + loop}, {"loop wait", v[6], loop},
	} {
		if c.share == "" {
			if c.part > 0.0005 && (c.name == "engine" || c.name == "engine wait") {
				t.Errorf("%s %.4f ms in the account but not in the verdict line", c.name, c.part)
			}
			continue
		}
		if got := f(c.share); math.Abs(got-100*c.part/cycle) > 1 {
			t.Errorf("%s share %v%% in the verdict line, %.2f%% recomputed from the account (%.4f of %.4f ms):\n%s",
				c.name, got, 100*c.part/cycle, c.part, cycle, out)
		}
	}
	tr := totalsRE.FindStringSubmatch(out)
	if tr == nil {
		t.Fatalf("no Totals row:\n%s", out)
	}
	for i, want := range []float64{eng, wait, path, proxy, loop} {
		if got := f(tr[i+1]); math.Abs(got-want) > 0.0001 {
			t.Errorf("Totals column %d = %s, the account's %.4f:\n%s", i, tr[i+1], want, out)
		}
	}
	t.Logf("verdict %q; account %q", v[0], a[0])
}

// TestDemoAccount: the demo's exit verdict adds up to the table printed
// with it (checkAccount), with redis-server and with the embedded
// miniredis (no engine figures).
func TestDemoAccount(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  []string
	}{{"redis-server", nil}, {"miniredis", []string{"PATH="}}} {
		t.Run(tc.name, func(t *testing.T) {
			stdout, stderr, code := runCLI(t, tc.env, "demo", "--duration", "1500ms", "--conns", "4")
			if code != exitOK {
				t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
			}
			checkAccount(t, stdout)
		})
	}
}
