package main

import (
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/respmeter/respmeter/internal/redistest"
	"github.com/respmeter/respmeter/metrics/split"
)

// The exit verdict's line and the account printed under the "where the
// time went" table (writeVerdict).
const (
	sharesRE = `cycle \S+: client (\d+)% \| path (\d+)% \| engine (?:(\d+)%|n/a[^|]*)` +
		`(?: \| engine wait (\d+)%(?: \(run queue \d+%\))?)? \| proxy (\d+)%(?: \((?:tls \d+%(?:, )?)?(?:loop wait (\d+)%)?\))?(?: \| injected (\d+)%)? — `
	partsRE = `account per request \(ms\): think (\S+) \+ path (\S+) \+ engine (\S+) \+ queue (\S+) \+ ` +
		`other_clients (\S+) \+ run_queue (\S+) \+ proxy (\S+) \+ loop_wait_request (\S+) \+ loop_wait_reply (\S+) \+ injected (\S+) \+ tls (\S+) = cycle (\S+)$`
)

var (
	verdictLineRE = regexp.MustCompile(`(?m)^verdict: ` + sharesRE)
	accountRE     = regexp.MustCompile(`(?m)^` + partsRE)
	// The latest interval with requests and its own account under it.
	latestLineRE    = regexp.MustCompile(`(?m)^latest interval with requests \([^)]*\): ` + sharesRE)
	latestAccountRE = regexp.MustCompile(`(?m)^its ` + partsRE)
	totalsRE        = regexp.MustCompile(`(?m)^Totals +\d+ +\S+ +\S+ +(\S+) +(\S+) +\S+ +(\S+) +(\S+) +(\S+) +(\S+)$`)
	// The "where the time went" table from its header to its Totals row,
	// and a row of it: name, Timed and the nine columns.
	tableRE = regexp.MustCompile(`(?ms)^Command +Timed .*?^Totals [^\n]*$`)
	rowRE   = regexp.MustCompile(`^(\S+) +(\d+)((?: +\S+){9})$`)
)

// checkRows checks that each column of the "where the time went" table's
// Totals row (the account) is the request-weighted mean of the command
// rows above it (each the command's part of the account), within the
// rounding of the 4 decimals printed, and that their Timed counts add up
// to its own: a row and the Totals row give the same parts the same names
// and values, whatever moved the time between them (the loop wait of a
// starved host out of the path and the think time).
func checkRows(t testing.TB, out string) {
	t.Helper()
	table := tableRE.FindString(out)
	if table == "" {
		t.Fatalf("no table with a Totals row:\n%s", out)
	}
	var n float64
	var sums [9]float64
	var totals []string
	for line := range strings.SplitSeq(table, "\n") {
		m := rowRE.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		cols := strings.Fields(m[3])
		if m[1] == "Totals" {
			totals = append([]string{m[2]}, cols...)
			break
		}
		k := parseMillis(t, m[2])
		n += k
		for i, c := range cols {
			sums[i] += k * parseMillis(t, c)
		}
	}
	if totals == nil || n == 0 {
		t.Fatalf("no command rows above the Totals row:\n%s", table)
	}
	if got := parseMillis(t, totals[0]); got != n {
		t.Errorf("Totals row of %v requests, its rows %v:\n%s", got, n, table)
	}
	names := []string{"total", "upstream", "engine", "wait", "run queue", "path", "proxy", "loop wait", "injected"}
	for i, name := range names {
		want := parseMillis(t, totals[i+1])
		if got := sums[i] / n; math.Abs(got-want) > 0.00011 {
			t.Errorf("%s: the rows' request-weighted mean %.5f ms, the Totals row %s:\n%s", name, got, totals[i+1], table)
		}
	}
}

// checkAccount checks, in the output of a run's exit (out), that the
// verdict line's shares are recomputed within 1 point from the account
// printed under the table, that the table's Totals row holds the same
// parts (engine, wait, path, proxy, loop wait; "-" where the row has
// none) and is the request-weighted mean of the command rows above it
// (checkRows), and that the latest interval's verdict line is recomputed
// alike from its own account printed under it.
func checkAccount(t testing.TB, out string) {
	t.Helper()
	v := verdictLineRE.FindStringSubmatch(out)
	a := accountRE.FindStringSubmatch(out)
	if v == nil || a == nil {
		t.Fatalf("no verdict line or account:\n%s", out)
	}
	path, eng, wait, proxy, loop, inj := checkShares(t, "verdict", v, a, out)
	tr := totalsRE.FindStringSubmatch(out)
	if tr == nil {
		t.Fatalf("no Totals row:\n%s", out)
	}
	for i, want := range []float64{eng, wait, path, proxy, loop, inj} {
		if got := parseMillis(t, tr[i+1]); math.Abs(got-want) > 0.00021 {
			t.Errorf("Totals column %d = %s, the account's %.4f:\n%s", i, tr[i+1], want, out)
		}
	}
	checkRows(t, out)
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
func checkShares(t testing.TB, what string, v, a []string, out string) (path, eng, wait, proxy, loop, inj float64) {
	t.Helper()
	f := func(s string) float64 { return parseMillis(t, s) }
	var sum float64
	for i := 1; i <= len(split.PartNames); i++ {
		sum += f(a[i])
	}
	cycle := f(a[len(split.PartNames)+1])
	if math.Abs(sum-cycle) > 0.0006 {
		t.Errorf("%s: account parts add up to %.4f ms, cycle %.4f", what, sum, cycle)
	}
	// The verdict line's groups: wait = queue + other_clients +
	// run_queue, loop wait = loop_wait_request + loop_wait_reply.
	think := f(a[1])
	// proxy holds tls (the Totals row's proxy and the verdict's share).
	path, eng, wait, proxy, loop, inj = f(a[2]), f(a[3]), f(a[4])+f(a[5])+f(a[6]), f(a[7])+f(a[11]), f(a[8])+f(a[9]), f(a[10])
	for _, c := range []struct {
		name  string
		share string
		part  float64
	}{
		{"client", v[1], think}, {"path", v[2], path}, {"engine", v[3], eng}, {"engine wait", v[4], wait},
		{"proxy", v[5], proxy + loop}, {"loop wait", v[6], loop}, {"injected", v[7], inj},
	} {
		if c.share == "" {
			if c.part > 0.0005 && (c.name == "engine" || c.name == "engine wait" || c.name == "injected") {
				t.Errorf("%s: %s %.4f ms in the account but not in the line", what, c.name, c.part)
			}
			continue
		}
		if got := f(c.share); math.Abs(got-100*c.part/cycle) > 1 {
			t.Errorf("%s: %s share %v%% in the line, %.2f%% recomputed from the account (%.4f of %.4f ms):\n%s",
				what, c.name, got, 100*c.part/cycle, c.part, cycle, out)
		}
	}
	return path, eng, wait, proxy, loop, inj
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

// TestAccountEverywhere: one run of "respmeter proxy" in front of a real
// redis-server with go-redis clients, after which the account since start
// is read from every place that shows it — /stats "account" (and its
// per-command parts against the exit table's rows), /metrics
// (respmeter_verdict_seconds_total{part} over
// respmeter_verdict_requests_total), the live page's "since start" row in
// a real headless Chromium, and the exit's "account per request" line and
// Totals row — and each part must be the same number in all of them (to
// the 4 decimals of a millisecond the table and page print). The load
// stops and an idle interval passes before the reads, so that the account
// no longer changes between them; the verdict line's shares are
// recomputed from the table (checkAccount).
func TestAccountEverywhere(t *testing.T) {
	browser := chromiumPath(t)
	srv := redistest.Start(t) // skips without redis-server or with -short
	p, addr, admin := startProxy(t, srv.Addr(), "--loops", "2")

	gets := startGets(t, addr)
	type account struct {
		Requests     int64              `json:"requests"`
		CycleSeconds float64            `json:"cycle_seconds"`
		Parts        map[string]float64 `json:"parts"`
		Bound        string             `json:"bound"`
		Commands     map[string]struct {
			Requests int64              `json:"requests"`
			Parts    map[string]float64 `json:"parts"`
		} `json:"commands"`
	}
	type doc struct {
		Verdict *struct {
			Requests int64 `json:"requests"`
		} `json:"verdict"`
		Account *account `json:"account"`
	}
	// Three intervals with requests, then none: the account is final once
	// an interval without requests has ended.
	redistest.Eventually(t, 30*time.Second, func() error {
		var d doc
		getJSON(t, "http://"+admin+"/stats", &d)
		if d.Account == nil || d.Account.Requests < 3*1000 || d.Verdict == nil || d.Verdict.Requests == 0 {
			return fmt.Errorf("account %+v", d.Account)
		}
		return nil
	})
	gets.stop()
	sent := gets.count.Load()
	var st doc
	redistest.Eventually(t, 30*time.Second, func() error {
		st = doc{}
		getJSON(t, "http://"+admin+"/stats", &st)
		if st.Verdict == nil || st.Verdict.Requests != 0 || st.Account == nil || st.Account.Requests < sent {
			return fmt.Errorf("no idle interval after %d GETs yet: %+v", sent, st.Account)
		}
		return nil
	})
	acc := st.Account
	// The clients' own count: every GET answered is in the account, and
	// little else (a go-redis connection's handshake).
	if acc.Requests < sent || acc.Requests > sent+50 {
		t.Errorf("account of %d requests, the clients got %d replies", acc.Requests, sent)
	}
	if len(acc.Parts) != len(split.PartNames) {
		t.Fatalf("/stats account parts %v, want %v", acc.Parts, split.PartNames)
	}
	var sum float64
	for _, name := range split.PartNames {
		sum += acc.Parts[name]
	}
	if math.Abs(sum-acc.CycleSeconds) > 1e-8 {
		t.Errorf("/stats account parts add up to %.9f s, cycle %.9f", sum, acc.CycleSeconds)
	}
	t.Logf("/stats account: %d requests, %s, parts (s) %v", acc.Requests, acc.Bound, acc.Parts)
	// Its commands' parts, weighted by their requests, add up to its own.
	var cmdN int64
	for _, c := range acc.Commands {
		cmdN += c.Requests
	}
	if cmdN != acc.Requests {
		t.Errorf("/stats account commands of %d requests, the account %d: %+v", cmdN, acc.Requests, acc.Commands)
	}
	for _, name := range split.PartNames {
		var sum float64
		for _, c := range acc.Commands {
			sum += c.Parts[name] * float64(c.Requests)
		}
		if got := sum / float64(acc.Requests); math.Abs(got-acc.Parts[name]) > 1e-8 {
			t.Errorf("%s: /stats account commands' mean %.9f s, the account's %.9f", name, got, acc.Parts[name])
		}
	}

	// /metrics: the counters over the requests, to the nanosecond.
	prom := httpGet(t, "http://"+admin+"/metrics")
	promValue := func(re string) float64 {
		t.Helper()
		m := regexp.MustCompile(`(?m)^` + re + ` (\S+)$`).FindStringSubmatch(prom)
		if m == nil {
			t.Fatalf("/metrics has no %s", re)
		}
		x, err := strconv.ParseFloat(m[1], 64)
		if err != nil {
			t.Fatal(err)
		}
		return x
	}
	if n := promValue(`respmeter_verdict_requests_total`); int64(n) != acc.Requests {
		t.Errorf("respmeter_verdict_requests_total %v, /stats account %d requests", n, acc.Requests)
	}
	for _, name := range split.PartNames {
		got := promValue(`respmeter_verdict_seconds_total\{part="`+name+`"\}`) / float64(acc.Requests)
		if math.Abs(got-acc.Parts[name]) > 2e-9 {
			t.Errorf("%s: /metrics %.9f s per request, /stats %.9f", name, got, acc.Parts[name])
		}
	}

	// The live page's "since start" row, once it has read this account.
	ctx := openLivePage(t, browser, admin)
	row := `(() => { const r = document.querySelector('#account tr[data-row="since-start"]'); if (!r) return "";
		return [...r.querySelectorAll('td[data-part]')].map(c => c.dataset.part + "=" + c.textContent).join(","); })()`
	page := map[string]string{}
	redistest.EventuallyEvery(t, 60*time.Second, 200*time.Millisecond, func() error {
		got, err := chromedp.Run(ctx, chromedp.Evaluate[string](row))
		if err != nil {
			return err
		}
		clear(page)
		for kv := range strings.SplitSeq(got, ",") {
			if k, v, ok := strings.Cut(kv, "="); ok {
				page[k] = v
			}
		}
		if page["requests"] != strconv.FormatInt(acc.Requests, 10) {
			return fmt.Errorf("live page's since-start row %q", got)
		}
		return nil
	})
	// Both print milliseconds to 4 decimals; JavaScript's and Go's
	// rounding of a last digit 5 may differ.
	same := func(printed string, seconds float64) bool {
		return math.Abs(parseMillis(t, printed)-1000*seconds) <= 0.00006
	}
	for _, name := range split.PartNames {
		if !same(page[name], acc.Parts[name]) {
			t.Errorf("%s: live page %s ms, /stats %.6f ms", name, page[name], 1000*acc.Parts[name])
		}
	}
	if !same(page["cycle"], acc.CycleSeconds) {
		t.Errorf("cycle: live page %s ms, /stats %.6f ms", page["cycle"], 1000*acc.CycleSeconds)
	}

	// The exit's account line and Totals row.
	p.signal(t, syscall.SIGTERM)
	if code := p.wait(t); code != exitOK {
		t.Fatalf("exit %d after SIGTERM\nstderr:\n%s", code, p.stderr)
	}
	out := p.stdout.String()
	checkAccount(t, out)
	line := accountRE.FindStringSubmatch(out)
	for i, name := range split.PartNames {
		if !same(line[i+1], acc.Parts[name]) {
			t.Errorf("%s: exit's account line %s ms, /stats %.6f ms", name, line[i+1], 1000*acc.Parts[name])
		}
	}
	if !same(line[len(split.PartNames)+1], acc.CycleSeconds) {
		t.Errorf("cycle: exit's account line %s ms, /stats %.6f ms", line[len(split.PartNames)+1], 1000*acc.CycleSeconds)
	}
	// Each command's row, as /stats account "commands" has it.
	for name, c := range acc.Commands {
		m := regexp.MustCompile(`(?m)^` + name + ` +(\d+) +\S+ +\S+ +(\S+) +(\S+) +(\S+) +(\S+) +(\S+) +(\S+) +(\S+)$`).FindStringSubmatch(out)
		if m == nil {
			t.Errorf("no %s row in the exit's table", name)
			continue
		}
		cp := c.Parts
		if m[1] != strconv.FormatInt(c.Requests, 10) {
			t.Errorf("%s: the exit's row of %s requests, /stats %d", name, m[1], c.Requests)
		}
		for i, want := range []float64{cp["engine"], cp["queue"] + cp["other_clients"] + cp["run_queue"], cp["run_queue"], cp["path"],
			cp["proxy"], cp["loop_wait_request"] + cp["loop_wait_reply"], cp["injected"]} {
			if !same(m[i+2], want) {
				t.Errorf("%s: the exit's row column %d %s ms, /stats %.6f ms", name, i, m[i+2], 1000*want)
			}
		}
	}
	// The Totals row: engine, wait, path, proxy and loop wait.
	tr := totalsRE.FindStringSubmatch(out)
	pp := acc.Parts
	for i, want := range []float64{pp["engine"], pp["queue"] + pp["other_clients"] + pp["run_queue"], pp["path"], pp["proxy"] + pp["tls"],
		pp["loop_wait_request"] + pp["loop_wait_reply"], pp["injected"]} {
		if !same(tr[i+1], want) {
			t.Errorf("Totals column %d: %s ms, /stats %.6f ms", i, tr[i+1], 1000*want)
		}
	}
	if m := regexp.MustCompile(`(?m)^verdict: .* — ([a-z-]+)`).FindStringSubmatch(out); m == nil || m[1] != acc.Bound {
		t.Errorf("exit verdict %q, /stats account %s", m, acc.Bound)
	}
	t.Logf("live page %v; exit line %q", page, line[0])
}
