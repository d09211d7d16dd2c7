package main

import (
	"math"
	"regexp"
	"strconv"
	"testing"
)

// The exit verdict's line and the account printed under the "where the
// time went" table (writeVerdict).
const (
	sharesRE = `cycle \S+: client (\d+)% \| path (\d+)% \| engine (?:(\d+)%|n/a[^|]*)` +
		`(?: \| engine wait (\d+)%(?: \(run queue \d+%\))?)? \| proxy (\d+)%(?: \(loop wait (\d+)%\))? — `
	partsRE = `account per request \(ms\): think (\S+) \+ path (\S+) \+ engine (\S+) \+ wait (\S+) \+ ` +
		`proxy (\S+) \+ loop wait (\S+) = cycle (\S+)$`
)

var (
	verdictLineRE = regexp.MustCompile(`(?m)^verdict: ` + sharesRE)
	accountRE     = regexp.MustCompile(`(?m)^` + partsRE)
	// The latest interval with requests and its own account under it.
	latestLineRE    = regexp.MustCompile(`(?m)^latest interval with requests \([^)]*\): ` + sharesRE)
	latestAccountRE = regexp.MustCompile(`(?m)^its ` + partsRE)
	totalsRE        = regexp.MustCompile(`(?m)^Totals +\d+ +\S+ +\S+ +(\S+) +(\S+) +\S+ +(\S+) +(\S+) +(\S+)$`)
)

// checkAccount checks, in the output of a run's exit (out), that the
// verdict line's shares are recomputed within 1 point from the account
// printed under the table, that the table's Totals row holds the same
// parts (engine, wait, path, proxy, loop wait; "-" where the row has
// none), and that the latest interval's verdict line is recomputed alike
// from its own account printed under it.
func checkAccount(t testing.TB, out string) {
	t.Helper()
	v := verdictLineRE.FindStringSubmatch(out)
	a := accountRE.FindStringSubmatch(out)
	if v == nil || a == nil {
		t.Fatalf("no verdict line or account:\n%s", out)
	}
	path, eng, wait, proxy, loop := checkShares(t, "verdict", v, a, out)
	tr := totalsRE.FindStringSubmatch(out)
	if tr == nil {
		t.Fatalf("no Totals row:\n%s", out)
	}
	for i, want := range []float64{eng, wait, path, proxy, loop} {
		if got := parseMillis(t, tr[i+1]); math.Abs(got-want) > 0.0001 {
			t.Errorf("Totals column %d = %s, the account's %.4f:\n%s", i, tr[i+1], want, out)
		}
	}
	t.Logf("verdict %q; account %q", v[0], a[0])
	// The latest interval's line, recomputed from its own account.
	lv, la := latestLineRE.FindStringSubmatch(out), latestAccountRE.FindStringSubmatch(out)
	if lv == nil || la == nil {
		t.Fatalf("no latest interval's verdict line or account:\n%s", out)
	}
	checkShares(t, "latest interval", lv, la, out)
	t.Logf("latest interval %q; its account %q", lv[0], la[0])
}

// parseMillis parses a figure of the table or an account ("-": 0).
func parseMillis(t testing.TB, s string) float64 {
	t.Helper()
	if s == "" || s == "-" {
		return 0
	}
	x, err := strconv.ParseFloat(s, 64)
	if err != nil {
		t.Fatalf("%q: %v", s, err)
	}
	return x
}

// checkShares checks that the shares of a verdict line (v, sharesRE's
// groups) are recomputed within 1 point from the account a (partsRE's
// groups) and returns the account's parts the table's Totals row holds.
func checkShares(t testing.TB, what string, v, a []string, out string) (path, eng, wait, proxy, loop float64) {
	t.Helper()
	f := func(s string) float64 { return parseMillis(t, s) }
	think, path, eng, wait, proxy, loop, cycle := f(a[1]), f(a[2]), f(a[3]), f(a[4]), f(a[5]), f(a[6]), f(a[7])
	if sum := think + path + eng + wait + proxy + loop; math.Abs(sum-cycle) > 0.0005 {
		t.Errorf("%s: account parts add up to %.4f ms, cycle %.4f", what, sum, cycle)
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
				t.Errorf("%s: %s %.4f ms in the account but not in the line", what, c.name, c.part)
			}
			continue
		}
		if got := f(c.share); math.Abs(got-100*c.part/cycle) > 1 {
			t.Errorf("%s: %s share %v%% in the line, %.2f%% recomputed from the account (%.4f of %.4f ms):\n%s",
				what, c.name, got, 100*c.part/cycle, c.part, cycle, out)
		}
	}
	return path, eng, wait, proxy, loop
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
