package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
	"unicode/utf8"
	"unsafe"

	"github.com/chromedp/chromedp"
	"github.com/redis/go-redis/v9"

	"github.com/respmeter/respmeter/internal/redistest"
	"github.com/respmeter/respmeter/internal/resp"
	"github.com/respmeter/respmeter/metrics/heat"
)

// hugeKeysEnv turns TestHeatHugeBinaryKeys on: it moves 3 GiB of key
// bytes through the proxy to a redis-server (the proxy's RSS peaks near
// 2.5 GiB, redis-server's near 1 GiB; 1-2 minutes on a busy 2-core
// machine): .ci/test runs it once, alone and without the race detector,
// and go test without it skips it.
const hugeKeysEnv = "RESPMETER_TEST_HUGE_KEYS"

// binaryKeys are key names that JSON, Prometheus's text format and HTML
// each treat specially, none of them valid UTF-8 text as a whole: NUL and
// bytes 0xfe, 0xff, a broken two-byte sequence, the JavaScript line
// separators, markup, quotes and control characters, and a key of
// three-byte runes longer than heat.MaxKeyBytes, so that its cut falls
// inside a rune.
var binaryKeys = []string{
	"bin:\x00\x01\xfe\xff",
	"utf8:\xc3\x28\xa0\xa1",
	"sep:\u2028\u2029",
	`html:</script><img src=x id=injected>`,
	"quote:\"\\\r\n\t",
	"cut:x" + strings.Repeat("€", 30),
}

// TestHeatHugeBinaryKeys sends key names no text format expects through
// `respmeter proxy --heat --heat-sample 1` to a real redis-server: the
// binaryKeys, SET three times each, and two keys as long as Redis accepts
// (proto-max-bulk-len, 512 MiB: one of 512 MiB read twice, one a byte
// shorter read once, with GET, so that the engine does not keep them),
// binary and without a hash tag, so that their slot's CRC16 and their
// hash read every byte. Then /keys, /keys?n=10 and /slots (what the live
// page reads), /stats, /metrics and the summary at exit (stdout and the
// --summary file, with its heat section) are valid UTF-8,
// the documents valid JSON, each a few KiB; with plain names every key
// shows escaped and cut to heat.MaxKeyBytes (the huge ones marked
// truncated, yet counted apart: 2 and 1 requests), and the live page in a
// real headless Chromium shows the markup key as text, no element made of
// it; with hashed names no key's bytes show. The proxy's heap after the
// huge requests, their connection closed and a GC, is within 16 MiB of
// what it was before them: heat keeps MaxKeyBytes of a key, never the key,
// and the proxy lets go of a large request's buffer. The peak RSS is
// logged.
//
// It runs only with RESPMETER_TEST_HUGE_KEYS=1 (hugeKeysEnv says why).
func TestHeatHugeBinaryKeys(t *testing.T) {
	if os.Getenv(hugeKeysEnv) == "" {
		t.Skipf("sends three 512 MiB keys through the proxy: set %s=1 to run it", hugeKeysEnv)
	}
	srv := redistest.Start(t)
	// Fresh memory from the OS, written only in its first page: the zero
	// bytes after it are read, never made resident. Both keys share it.
	buf := make([]byte, resp.DefaultMaxBulkLen)
	copy(buf, "huge:\x00\xff\xfe\"<>&\\\n</script>")
	huge := [2][]byte{buf, buf[:len(buf)-1]}
	for _, names := range []string{"plain", "hash"} {
		t.Run(names, func(t *testing.T) {
			// --upstream-timeout 0: the engine's silence is timed from
			// when a request is queued to it, and on a busy machine
			// writing 512 MiB to the engine outlasts the default 5 s.
			summary := filepath.Join(t.TempDir(), "summary.json")
			p, addr, admin := startProxy(t, srv.Addr(), "--loops", "2", "--heat", "--heat-sample", "1", "--key-names", names,
				"--upstream-timeout", "0", "--summary", summary)
			c := goRedis(addr, 2)
			defer c.Close()
			ctx := context.Background()
			for _, k := range binaryKeys {
				for range 3 {
					if err := c.Set(ctx, k, "v", 0).Err(); err != nil {
						t.Fatalf("SET %q: %v", k, err)
					}
				}
			}
			heapBefore := heapInuse(t, admin)

			// One connection of its own, closed after, so that the
			// proxy's buffers for it go too; timeouts long enough to move
			// 512 MiB on a busy machine.
			hc := redis.NewClient(&redis.Options{Addr: addr, Protocol: 2, MaxRetries: -1, PoolSize: 1,
				ReadTimeout: 2 * time.Minute, WriteTimeout: 2 * time.Minute})
			start := time.Now()
			for i, k := range huge {
				for range 2 - i { // 2 and 1 requests: a distinct count each
					// unsafe.String: the key's bytes are never changed, and
					// a copy would make 512 MiB resident in the test.
					if err := hc.Get(ctx, unsafe.String(&k[0], len(k))).Err(); !errors.Is(err, redis.Nil) {
						t.Fatalf("GET of a %d-byte key: %v", len(k), err)
					}
				}
			}
			t.Logf("3 GETs of 512 MiB keys in %v", time.Since(start).Round(time.Millisecond))
			_ = hc.Close()
			redistest.Eventually(t, 10*time.Second, func() error {
				if n := slotRequests(t, admin); n != int64(3*len(binaryKeys)+3) {
					return fmt.Errorf("the slots count %d requests, want %d", n, 3*len(binaryKeys)+3)
				}
				return nil
			})

			docs := map[string][]byte{}
			for _, path := range []string{"/keys", "/keys?n=10", "/slots", "/stats", "/metrics"} {
				docs[path] = []byte(httpGet(t, "http://"+admin+path))
			}
			for path, doc := range docs {
				if !utf8.Valid(doc) {
					t.Errorf("%s is not valid UTF-8", path)
				}
				if path != "/metrics" && !json.Valid(doc) {
					t.Errorf("%s is not valid JSON:\n%.4000s", path, doc)
				}
				if path != "/metrics" && path != "/stats" && len(doc) > 64<<10 {
					t.Errorf("%s is %d bytes, want a few KiB", path, len(doc))
				}
			}
			heatLines := regexp.MustCompile(`(?m)^respmeter_heat_key_\w+\{.*$`).FindAll(docs["/metrics"], -1)
			for _, l := range heatLines {
				if len(l) > 512 {
					t.Errorf("/metrics heat line of %d bytes: %.300s", len(l), l)
				}
			}

			var doc heat.Keys
			if err := json.Unmarshal(docs["/keys"], &doc); err != nil {
				t.Fatal(err)
			}
			shown := map[string]heat.Key{}
			for _, k := range doc.ByRequests {
				shown[k.Key] = k
			}
			// /metrics has a series per name shown among the top 20 keys
			// by requests (the default --heat-metrics-keys).
			if n := len(regexp.MustCompile(`(?m)^respmeter_heat_key_requests\{`).FindAll(docs["/metrics"], -1)); n != len(shown) {
				t.Errorf("/metrics has %d respmeter_heat_key_requests series, want %d:\n%s", n, len(shown), bytes.Join(heatLines, []byte("\n")))
			}
			// Plain names show the two huge keys alike (cut); hashes differ.
			wantNames := len(binaryKeys) + 1
			if names == "hash" {
				wantNames++
			}
			if len(doc.ByRequests) != len(binaryKeys)+2 || len(shown) != wantNames {
				t.Fatalf("%d keys by requests (%d names), want %d (%d names):\n%s", len(doc.ByRequests), len(shown), len(binaryKeys)+2, wantNames, docs["/keys"])
			}
			all := append(append([]string{}, binaryKeys...), string(buf[:heat.MaxKeyBytes]))
			switch names {
			case "plain":
				want := map[string]float64{}
				for _, k := range binaryKeys {
					want[quoted(k[:min(len(k), heat.MaxKeyBytes)])] = 3
				}
				for k, got := range shown {
					if n, ok := want[k]; ok && (got.Estimate != n || got.Truncated != (k == quoted(binaryKeys[5][:heat.MaxKeyBytes]))) {
						t.Errorf("%q: %+v, want %.0f requests", k, got, n)
					}
				}
				for k := range want {
					if _, ok := shown[k]; !ok {
						t.Errorf("%q not in /keys:\n%s", k, docs["/keys"])
					}
				}
				// The two huge keys show alike, cut; they are counted
				// apart, under the hash of all their bytes.
				var counts []float64
				for _, k := range doc.ByRequests {
					if k.Key == quoted(string(buf[:heat.MaxKeyBytes])) {
						if !k.Truncated {
							t.Errorf("huge key not marked truncated: %+v", k)
						}
						counts = append(counts, k.Estimate)
					}
				}
				if fmt.Sprint(counts) != "[2 1]" {
					t.Errorf("the huge keys were counted %v, want [2 1]:\n%s", counts, docs["/keys"])
				}
			case "hash":
				for path, d := range docs {
					for _, k := range all {
						// The part of each key no format would escape.
						part := k[:strings.IndexByte(k, ':')+1]
						if bytes.Contains(d, []byte(part)) {
							t.Errorf("%s holds %q of a key name", path, part)
						}
					}
				}
			}

			if names == "plain" {
				livePageShows(t, admin, quoted(binaryKeys[3]))
			}

			heapAfter := heapInuse(t, admin)
			hwm, rss := procStatusKiB(t, p.cmd.Process.Pid, "VmHWM"), procStatusKiB(t, p.cmd.Process.Pid, "VmRSS")
			t.Logf("proxy heap in use %.1f MiB before the huge keys, %.1f MiB after; RSS peak %.0f MiB, now %.0f MiB",
				float64(heapBefore)/(1<<20), float64(heapAfter)/(1<<20), float64(hwm)/1024, float64(rss)/1024)
			if heapAfter > heapBefore+16<<20 {
				t.Errorf("the proxy's heap grew by %.1f MiB over the huge keys (limit 16 MiB); where its heap in use is:\n%s",
					float64(heapAfter-heapBefore)/(1<<20), heapHolders(t, admin, 1<<20))
			}

			p.signal(t, syscall.SIGTERM)
			if code := p.wait(t); code != exitOK {
				t.Fatalf("exit %d\n%s", code, p.stderr)
			}
			// The summary at exit: the table on stdout and the JSON file,
			// whose "heat" section holds the top keys.
			js, err := os.ReadFile(summary)
			if err != nil {
				t.Fatal(err)
			}
			if !json.Valid(js) || !utf8.Valid(js) || len(js) > 1<<20 || !bytes.Contains(js, []byte(`"heat"`)) {
				t.Errorf("summary file: %d bytes, valid JSON %v, valid UTF-8 %v, want a heat section", len(js), json.Valid(js), utf8.Valid(js))
			}
			for _, out := range []string{p.stdout.String(), string(js)} {
				if !utf8.ValidString(out) {
					t.Errorf("the summary at exit is not valid UTF-8")
				}
				for _, k := range all {
					if part := k[:strings.IndexByte(k, ':')+1]; names == "hash" && strings.Contains(out, part) {
						t.Errorf("the summary at exit holds %q of a key name:\n%.4000s", part, out)
					}
				}
			}
		})
	}
}

// quoted is how heat shows a plain key: Go-escaped, without the quotes.
func quoted(k string) string {
	q := strconv.Quote(k)
	return q[1 : len(q)-1]
}

// slotRequests returns the requests the proxy at admin counted in its
// slot heat.
func slotRequests(t testing.TB, admin string) int64 {
	t.Helper()
	var doc heat.Slots
	getJSON(t, "http://"+admin+"/slots", &doc)
	var n int64
	for _, s := range doc.Slots {
		n += s.Requests
	}
	return n
}

// heapInuse returns the Go heap in use of the proxy at admin, in bytes,
// right after a garbage collection (its profiler's heap?gc=1 runs one;
// twice, so that sync.Pool's victim cache is emptied too).
func heapInuse(t *testing.T, admin string) int64 {
	t.Helper()
	for range 2 {
		_ = httpGet(t, "http://"+admin+"/debug/pprof/heap?gc=1")
	}
	m := regexp.MustCompile(`(?m)^go_memstats_heap_inuse_bytes ([0-9.e+]+)$`).FindStringSubmatch(httpGet(t, "http://"+admin+"/metrics"))
	if m == nil {
		t.Fatal("/metrics has no go_memstats_heap_inuse_bytes")
	}
	v, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		t.Fatal(err)
	}
	return int64(v)
}

// procStatusKiB returns a "Name: N kB" field of /proc/PID/status.
func procStatusKiB(t *testing.T, pid int, name string) int64 {
	t.Helper()
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+":"); ok {
			n, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatalf("/proc/%d/status has no %s", pid, name)
	return 0
}

// livePageShows loads the live page of the proxy at admin in a real
// headless Chromium and waits until its hot-keys table holds text, as
// shown, with no element made of a key name.
func livePageShows(t *testing.T, admin, text string) {
	t.Helper()
	ctx := openLivePage(t, chromiumPath(t), admin)
	redistest.EventuallyEvery(t, 60*time.Second, 200*time.Millisecond, func() error {
		table, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.getElementById("heat-keys").innerText`))
		if err != nil || !strings.Contains(table, text) {
			return fmt.Errorf("the hot keys table does not show %q (err %v):\n%s", text, err, table)
		}
		return nil
	})
	injected, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`document.getElementById("injected") !== null`))
	if err != nil || injected {
		t.Errorf("a key name became an element (err %v)", err)
	}
}

// heapHolders returns the records of the heap profile of the proxy at
// admin (debug=1 text) that hold at least min bytes in use.
func heapHolders(t *testing.T, admin string, min int64) string {
	t.Helper()
	var out strings.Builder
	rec := regexp.MustCompile(`^\d+: (\d+) \[`)
	for _, r := range strings.Split(httpGet(t, "http://"+admin+"/debug/pprof/heap?debug=1"), "\n\n") {
		if m := rec.FindStringSubmatch(r); m != nil {
			if n, _ := strconv.ParseInt(m[1], 10, 64); n >= min {
				out.WriteString(r + "\n\n")
			}
		}
	}
	return out.String()
}
