package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/redis/go-redis/v9"

	"github.com/respmeter/respmeter/internal/redistest"
)

// chromiumPath returns the headless browser the live-page test drives:
// $RESPMETER_CHROMIUM, else chromium (Debian's package) or a Chrome from
// PATH; it skips t when there is none.
func chromiumPath(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("RESPMETER_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	redistest.SkipMissingTool(t, "no chromium in PATH (apt-get install -y chromium); the live page is not tested")
	return ""
}

// artifactDir returns where a test keeps files worth looking at after the
// run: $RESPMETER_ARTIFACTS when set (created), else t.TempDir().
func artifactDir(t *testing.T) string {
	t.Helper()
	if d := os.Getenv("RESPMETER_ARTIFACTS"); d != "" {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		return d
	}
	return t.TempDir()
}

// newBrowser starts the headless browser at path with a 1400×900 window
// and returns a context for chromedp.Run that ends after timeout; the
// browser is closed when t ends.
func newBrowser(t *testing.T, path string, timeout time.Duration) context.Context {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path),
		chromedp.NoSandbox, // CI runs as root
		chromedp.WindowSize(1400, 900),
	)
	actx, cancelA := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(cancelA)
	bctx, cancelB := chromedp.NewContext(actx)
	t.Cleanup(cancelB)
	ctx, cancel := context.WithTimeout(bctx, timeout)
	t.Cleanup(cancel)
	return ctx
}

// loadGen runs closed-loop go-redis clients against addr, each calling op
// until stop; count holds the commands answered.
type loadGen struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup
	count  atomic.Int64
}

func startLoad(t *testing.T, addr string, clients int, op func(ctx context.Context, c *redis.Client, i int) error) *loadGen {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	g := &loadGen{cancel: cancel}
	for n := range clients {
		c := redis.NewClient(&redis.Options{Addr: addr, DisableIdentity: true, PoolSize: 1})
		g.wg.Go(func() {
			defer c.Close()
			for i := 0; ctx.Err() == nil; i++ {
				if err := op(ctx, c, n*1_000_000+i); err != nil && ctx.Err() == nil {
					t.Errorf("load: %v", err)
					return
				}
				g.count.Add(1)
			}
		})
	}
	t.Cleanup(g.stop)
	return g
}

func (g *loadGen) stop() { g.cancel(); g.wg.Wait() }

// startGets runs 4 closed-loop clients of GET on 100 missing keys.
func startGets(t *testing.T, addr string) *loadGen {
	t.Helper()
	return startLoad(t, addr, 4, func(ctx context.Context, c *redis.Client, i int) error {
		if err := c.Get(ctx, "k"+strconv.Itoa(i%100)).Err(); !errors.Is(err, redis.Nil) {
			return err
		}
		return nil
	})
}

// openLivePage opens the live page of the admin address with a 5 s
// window in a new headless browser and returns its context.
func openLivePage(t *testing.T, browser, admin string) context.Context {
	t.Helper()
	ctx := newBrowser(t, browser, 2*time.Minute)
	if _, err := chromedp.Run(ctx, chromedp.Navigate("http://"+admin+"/?window=5s")); err != nil {
		t.Fatalf("load the page: %v", err)
	}
	return ctx
}

// TestLivePage loads the live page at / in a real headless Chromium while
// go-redis clients drive a real redis-server through "respmeter proxy", and
// checks that the rendered DOM follows the load second by second: a GET
// row with a positive rate under GET load; then, once the load switches to
// SET, INCR and LPUSH, rows for those appear and the GET row leaves the
// 5-second window. The verdict bar must show shares summing to 100 %. A
// screenshot of the page under the second load is written to
// $RESPMETER_ARTIFACTS (or the test's temporary directory) as
// live-page.png.
func TestLivePage(t *testing.T) {
	browser := chromiumPath(t)
	srv := redistest.Start(t) // skips without redis-server or with -short
	p, addr, admin := startProxy(t, srv.Addr(), "--loops", "2", "--engine-poll", "500ms")

	gets := startGets(t, addr)
	ctx := openLivePage(t, browser, admin)

	// evalUntil polls the page's DOM with expr (JavaScript returning a
	// string) every 200 ms until ok accepts the result or 60 s pass.
	evalUntil := func(what, expr string, ok func(string) bool) string {
		t.Helper()
		var got string
		redistest.EventuallyEvery(t, 60*time.Second, 200*time.Millisecond, func() error {
			var err error
			if got, err = chromedp.Run(ctx, chromedp.Evaluate[string](expr)); err != nil || !ok(got) {
				return fmt.Errorf("%s: page shows %q (err %v)", what, got, err)
			}
			return nil
		})
		return got
	}
	const getRate = `(() => { const c = document.querySelector('#commands tr[data-command="get"] td.rate'); return c ? c.textContent : ""; })()`
	positive := func(s string) bool { f, err := strconv.ParseFloat(s, 64); return err == nil && f > 0 }
	evalUntil("GET row with a positive rate", getRate, positive)
	evalUntil("GET total p99 in ms", `(() => { const c = document.querySelector('#commands tr[data-command="get"] td.total-p99'); return c ? c.textContent : ""; })()`, positive)
	// The page keeps reading /stats: its update counter grows.
	u1 := evalUntil("updates", `document.getElementById("status").dataset.updates || ""`, positive)
	evalUntil("more updates", `document.getElementById("status").dataset.updates || ""`, func(s string) bool {
		a, _ := strconv.Atoi(u1)
		b, err := strconv.Atoi(s)
		return err == nil && b >= a+2
	})
	// The verdict bar: the eleven parts of the account (split.PartNames),
	// which sum to 100 %.
	evalUntil("verdict bar summing to 100 %", `(() => {
		const segs = [...document.querySelectorAll('#verdict-bar div')];
		if (segs.length !== 11) return "";
		return String(segs.reduce((s, d) => s + parseFloat(d.style.width), 0));
	})()`, func(s string) bool { f, err := strconv.ParseFloat(s, 64); return err == nil && f > 99.5 && f < 100.5 })

	// Switch the load: GET stops, SET, INCR and LPUSH start.
	getsDone := gets.count.Load()
	gets.stop()
	mixed := startLoad(t, addr, 3, func(ctx context.Context, c *redis.Client, i int) error {
		switch i % 3 {
		case 0:
			return c.Set(ctx, "k"+strconv.Itoa(i%100), "v", 0).Err()
		case 1:
			return c.Incr(ctx, "counter").Err()
		}
		return c.LPush(ctx, "list", "x").Err()
	})
	rows := `[...document.querySelectorAll('#commands tbody tr')].map(r => r.dataset.command).join(",")`
	got := evalUntil("SET, INCR and LPUSH rows and no GET row", rows, func(s string) bool {
		return s != "" && !contains(s, "get") && contains(s, "set") && contains(s, "incr") && contains(s, "lpush")
	})
	t.Logf("%d GETs before the switch; rows after: %s", getsDone, got)
	evalUntil("SET row with a positive rate", `(() => { const c = document.querySelector('#commands tr[data-command="set"] td.rate'); return c ? c.textContent : ""; })()`, positive)

	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100)) // quality 100: PNG (below: JPEG)
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	out := filepath.Join(artifactDir(t), "live-page.png")
	if err := os.WriteFile(out, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s (%d bytes)", out, len(png))

	// When the load stops, the page keeps the last busy verdict (held)
	// until its 5 s window has passed, then reads idle.
	mixed.stop()
	when := `document.getElementById("verdict-when").textContent`
	evalUntil("the last busy verdict held after the load stops", when, func(s string) bool {
		return strings.Contains(s, "kept until the window has passed")
	})
	evalUntil("idle once the window has passed", `document.getElementById("verdict-text").textContent`, func(s string) bool {
		return s == "no requests in the interval"
	})
	p.signal(t, syscall.SIGTERM)
	if code := p.wait(t); code != exitOK {
		t.Fatalf("exit %d after SIGTERM\nstderr:\n%s", code, p.stderr)
	}
}

// TestLivePageShards: under --route slots over two redis-servers, one of
// them behind a relay that delays each direction by 2 ms, the live page's
// shard rows show each shard's own engine and path (its probe and engine
// poll): the relayed shard's path above 2 ms, the other's under half of
// it, and both engines' GET execution well under a millisecond.
func TestLivePageShards(t *testing.T) {
	browser := chromiumPath(t)
	a, b := redistest.Start(t), redistest.Start(t)
	relayed := redistest.StartDelayRelay(t, b.Addr(), 2*time.Millisecond)
	shards := []string{a.Addr(), relayed}
	p := start(t, nil, "proxy", "--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0", "--loops", "1",
		"--route", "slots", "--shards", strings.Join(shards, ","),
		"--probe-interval", "50ms", "--engine-poll", "200ms", "--hdr-interval", "200ms")
	addr := p.waitFor(t, p.stderr, logAddr("proxy listening"))[1]
	admin := p.waitFor(t, p.stderr, logAddr("admin listening"))[1]
	load := startGets(t, addr)
	ctx := openLivePage(t, browser, admin)
	// cells returns "engine/path/bound" of each shard row, by address.
	const cells = `JSON.stringify(Object.fromEntries([...document.querySelectorAll('#shards tbody tr')].map(r =>
		[r.dataset.shard, ["engine", "path", "bound"].map(c => r.querySelector("td." + c).textContent)])))`
	var got map[string][3]string
	redistest.EventuallyEvery(t, 60*time.Second, 200*time.Millisecond, func() error {
		s, err := chromedp.Run(ctx, chromedp.Evaluate[string](cells))
		got = nil
		if err == nil && json.Unmarshal([]byte(s), &got) == nil && len(got) == 2 {
			direct, delayed := got[shards[0]], got[shards[1]]
			ed, _ := strconv.ParseFloat(direct[0], 64)
			el, errE := strconv.ParseFloat(delayed[0], 64)
			pd, errD := strconv.ParseFloat(direct[1], 64)
			pl, errL := strconv.ParseFloat(delayed[1], 64)
			if errE == nil && errD == nil && errL == nil && pl > 2 && pd < pl/2 && ed < 0.5 && el < 0.5 &&
				direct[2] != "" && delayed[2] != "" {
				return nil
			}
		}
		return fmt.Errorf("shard rows %v (err %v): want engine < 0.5 ms on both, path > 2 ms on %s and under half of it on %s", got, err, shards[1], shards[0])
	})
	t.Logf("shard rows (engine ms, path ms, bound): %v", got)
	load.stop() // before the proxy goes: its clients would fail to redial
	p.signal(t, syscall.SIGTERM)
	if code := p.wait(t); code != exitOK {
		t.Fatalf("exit %d after SIGTERM\nstderr:\n%s", code, p.stderr)
	}
}

// contains reports whether the comma-separated list s holds name.
func contains(s, name string) bool { return slices.Contains(strings.Split(s, ","), name) }

// TestPlotInChromium: `report --plot x.svg` drawn by a real Chromium keeps
// every label inside the SVG, with the fonts the SVG names and with each
// generic family forced on it (what a machine without Liberation Sans or
// Arial falls back to); the comparison plot's last tick is 99.99%.
func TestPlotInChromium(t *testing.T) {
	browser := chromiumPath(t)
	redis, valkey := testRuns(t)
	svgPath := filepath.Join(artifactDir(t), "plot_chromium.svg")
	if _, stderr, code := execReport(t, redis, "--compare", valkey, "--plot", svgPath, "--tags", `\.total$`); code != exitOK {
		t.Fatalf("report --plot: exit %d: %s", code, stderr)
	}
	ctx := newBrowser(t, browser, time.Minute)
	if _, err := chromedp.Run(ctx, chromedp.Navigate("file://"+svgPath)); err != nil {
		t.Fatalf("load %s: %v", svgPath, err)
	}
	// Each text's rendered box against the root svg's, in CSS pixels; the
	// result lists the texts that leave it, and the tick labels seen.
	const check = `(fam => {
	  const svg = document.documentElement, r = svg.getBoundingClientRect();
	  const out = [], ticks = [];
	  for (const t of document.querySelectorAll('text')) {
	    if (fam) t.style.fontFamily = fam;
	    const b = t.getBoundingClientRect();
	    if (t.textContent.endsWith('%')) ticks.push(t.textContent);
	    if (b.width === 0 || b.left < r.left - 0.5 || b.right > r.right + 0.5 || b.top < r.top - 0.5 || b.bottom > r.bottom + 0.5)
	      out.push(t.textContent + ' [' + [b.left, b.right, b.top, b.bottom].map(Math.round) + '] in [' + [r.left, r.right, r.top, r.bottom].map(Math.round) + ']');
	  }
	  return JSON.stringify({out, ticks});
	})`
	for _, fam := range []string{"", "sans-serif", "serif", "monospace"} {
		got, err := chromedp.Run(ctx, chromedp.Evaluate[string](check+"("+strconv.Quote(fam)+")"))
		if err != nil {
			t.Fatalf("font %q: %v", fam, err)
		}
		var res struct{ Out, Ticks []string }
		if err := json.Unmarshal([]byte(got), &res); err != nil {
			t.Fatalf("font %q: %v: %s", fam, err, got)
		}
		if len(res.Ticks) < 4 || res.Ticks[len(res.Ticks)-1] != "99.99%" {
			t.Errorf("font %q: tick labels %q, want 0%% .. 99.99%%", fam, res.Ticks)
		}
		for _, o := range res.Out {
			t.Errorf("font %q: label outside the SVG: %s", fam, o)
		}
	}
}
