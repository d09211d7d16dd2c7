package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/redis/go-redis/v9"

	"github.com/respmeter/respmeter/internal/redistest"
	"github.com/respmeter/respmeter/metrics/heat"
)

// TestHeatReshardFile runs "heat reshard" on a /slots document with a hot
// range in the first quarter of the slots: the prediction for the even
// 4-shard layout puts the hot range's requests on shard 0, and the proposed
// layout's predicted imbalance is lower, with moves that say so.
func TestHeatReshardFile(t *testing.T) {
	var doc heat.Slots
	for x := range heat.NumSlots {
		r := int64(1)
		if x >= 100 && x < 400 {
			r = 100
		}
		doc.Slots = append(doc.Slots, heat.Slot{Slot: x, Requests: r, Bytes: 10 * r})
	}
	b, _ := json.Marshal(doc)
	path := filepath.Join(t.TempDir(), "slots.json")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	stdout, stderr, code := runCLI(t, nil, "heat", "reshard", "--from", path, "--shards", "4", "--json")
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var rep reshardReport
	if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
		t.Fatalf("%v: %s", err, stdout)
	}
	if want := int64(4096 - 300 + 300*100); len(rep.Predicted) != 4 || rep.Predicted[0].Requests != want {
		t.Errorf("predicted %+v, want shard 0 with %d requests", rep.Predicted, want)
	}
	if rep.BalancedI.Requests >= rep.Imbalance.Requests || len(rep.Moves) == 0 {
		t.Errorf("proposed imbalance %.3f, even %.3f, %d moves", rep.BalancedI.Requests, rep.Imbalance.Requests, len(rep.Moves))
	}
	// The text form names the layout and the moves.
	stdout, _, code = runCLI(t, nil, "heat", "reshard", "--from", path, "--shards", "4")
	if code != exitOK || !strings.Contains(stdout, "0-4095;4096-8191;8192-12287;12288-16383") || !strings.Contains(stdout, "slots to move") {
		t.Errorf("exit %d:\n%s", code, stdout)
	}
	if _, _, code := runCLI(t, nil, "heat", "reshard", "--from", path); code != exitUsage {
		t.Errorf("without --shards: exit %d, want usage", code)
	}
}

// TestLivePageHeat loads the live page in a real headless Chromium while
// go-redis clients read keys through "respmeter proxy": with plain key
// names the hot-keys table lists them, a key holding HTML shows as text
// (no element made of it) and a slot heat strip is drawn; with
// --key-names hash no key name appears in the page, /keys, /slots,
// /metrics or the slow log, respmeter's own or the engine's (/slowlog,
// every command logged by respmeter and the engine alike); with plain
// names the slow logs hold them.
func TestLivePageHeat(t *testing.T) {
	browser := chromiumPath(t)
	srv := redistest.Start(t)
	srv.Do("CONFIG", "SET", "slowlog-log-slower-than", "0")
	for _, names := range []string{"plain", "hash"} {
		t.Run(names, func(t *testing.T) {
			_, addr, admin := startProxy(t, srv.Addr(), "--loops", "2", "--heat", "--key-names", names, "--heat-sample", "1",
				"--slowlog-threshold", "0")
			startLoad(t, addr, 2, func(ctx context.Context, c *redis.Client, i int) error {
				k := "secret-customer-" + strconv.Itoa(i%7)
				if i%5 == 0 {
					k = `<img src=x id=injected>`
				}
				if err := c.Get(ctx, k).Err(); !errors.Is(err, redis.Nil) {
					return err
				}
				return nil
			})
			ctx := openLivePage(t, browser, admin)
			var page string
			redistest.EventuallyEvery(t, 60*time.Second, 200*time.Millisecond, func() error {
				var err error
				page, err = chromedp.Run(ctx, chromedp.Evaluate[string](`(() => {
					const rows = document.querySelectorAll('#heat-keys tbody tr').length;
					const strips = document.querySelectorAll('#slot-strips canvas').length;
					if (rows < 3 || strips < 1) return "";
					return document.body.innerText;
				})()`))
				if err != nil || page == "" {
					return fmt.Errorf("no hot keys or slot strip yet (err %v)", err)
				}
				return nil
			})
			injected, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`document.getElementById("injected") !== null`))
			if err != nil || injected {
				t.Errorf("a key name became an element (err %v)", err)
			}
			var outputs []string
			for _, path := range []string{"/keys", "/slots", "/metrics", "/slowlog", "/slowlog?engine=1"} {
				resp, err := http.Get("http://" + admin + path)
				if err != nil {
					t.Fatal(err)
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				outputs = append(outputs, string(b))
			}
			outputs = append(outputs, page)
			for i, out := range outputs {
				leaked := strings.Contains(out, "secret-customer") || strings.Contains(out, "img src")
				if names == "hash" && leaked {
					t.Errorf("output %d holds a key name:\n%s", i, out)
				}
				if names == "plain" && i == len(outputs)-1 && (!strings.Contains(out, "secret-customer-") || !strings.Contains(out, "<img src=x id=injected>")) {
					t.Errorf("plain names: the page does not show the keys as text:\n%s", out)
				}
				if names == "plain" && (i == 3 || i == 4) && !strings.Contains(out, "secret-customer-") {
					t.Errorf("plain names: slow log %d holds no key:\n%s", i, out)
				}
			}
		})
	}
}

// TestHeatFromCapture captures a load through the proxy (one hot key read
// 500 times among 300 keys read once) and runs "heat FILE --shards 3
// --json" on the file: every request is counted, so the hot key tops the
// requests ranking with exactly 500, and the predicted shards' requests
// add up to the 800 GETs.
func TestHeatFromCapture(t *testing.T) {
	srv := redistest.Start(t)
	capDir := t.TempDir()
	st := capStack(t, srv.Addr(), capDir)
	path := filepath.Join(capDir, "heat.respcap")
	if code, s := adminPost(t, st, "/capture/start", url.Values{"file": {filepath.Base(path)}}); code != http.StatusOK || !s.Running {
		t.Fatalf("start: %d %+v", code, s)
	}
	c := goRedis(st.proxy.Addr(), 3)
	defer c.Close()
	ctx := context.Background()
	for i := range 800 {
		k := "hot:1"
		if i%8 < 3 {
			k = "cold:" + strconv.Itoa(i)
		}
		if err := c.Get(ctx, k).Err(); !errors.Is(err, redis.Nil) {
			t.Fatal(err)
		}
	}
	if code, s := adminPost(t, st, "/capture/stop", nil); code != http.StatusOK || s.Dropped != 0 {
		t.Fatalf("stop: %d %+v", code, s)
	}
	stdout, stderr, code := runCLI(t, nil, "heat", path, "--shards", "3", "--json", "--top", "3")
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var rep reshardReport
	if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
		t.Fatalf("%v: %s", err, stdout)
	}
	if rep.Keys == nil || len(rep.Keys.ByRequests) == 0 || rep.Keys.ByRequests[0].Key != "hot:1" || rep.Keys.ByRequests[0].Estimate != 500 || rep.Keys.ByRequests[0].Error != 0 {
		t.Fatalf("top key by requests: %s", stdout)
	}
	var total int64
	for _, s := range rep.Predicted {
		total += s.Requests
	}
	if total != 800 || len(rep.Predicted) != 3 {
		t.Errorf("predicted %+v: %d requests, want 800 over 3 shards", rep.Predicted, total)
	}
}
