package slowlog_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/respmeter/respmeter/metrics/slowlog"
)

// entry returns an Entry for command cmd with the given total, in seconds.
func entry(cmd string, total float64) slowlog.Entry {
	return slowlog.Entry{
		Command: cmd,
		Args:    2,
		Client:  "10.0.0.1:5000",
		Phases:  map[string]float64{"total": total, "upstream": total / 2, "proxy": total / 2},
	}
}

// ids returns the IDs of es in order.
func ids(es []slowlog.Entry) []int64 {
	out := make([]int64, len(es))
	for i, e := range es {
		out[i] = e.ID
	}
	return out
}

func TestNewDefaults(t *testing.T) {
	for _, tc := range []struct {
		name          string
		capacity      int
		threshold     time.Duration
		wantCap       int
		wantThreshold time.Duration
		wantEnabled   bool
	}{
		{"defaults", 0, slowlog.DefaultThreshold, slowlog.DefaultCapacity, 10 * time.Millisecond, true},
		{"negative capacity", -5, time.Second, 128, time.Second, true},
		{"zero threshold logs all", 3, 0, 3, 0, true},
		{"negative threshold disables", 3, -1, 3, slowlog.Disabled, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := slowlog.New(tc.capacity, tc.threshold)
			if got := l.Capacity(); got != tc.wantCap {
				t.Errorf("Capacity() = %d, want %d", got, tc.wantCap)
			}
			if got := l.Threshold(); got != tc.wantThreshold {
				t.Errorf("Threshold() = %v, want %v", got, tc.wantThreshold)
			}
			if got := l.Enabled(); got != tc.wantEnabled {
				t.Errorf("Enabled() = %v, want %v", got, tc.wantEnabled)
			}
		})
	}
}

func TestDisabledDropsEverything(t *testing.T) {
	l := slowlog.New(4, -1)
	if total := 24 * time.Hour; total >= l.Threshold() {
		t.Fatalf("a day reaches the threshold of a disabled Log")
	}
	l.Add(entry("get", 1))
	if l.Len() != 0 || len(l.Entries()) != 0 {
		t.Fatalf("disabled Log holds %d entries", l.Len())
	}
}

func TestRingWrapAround(t *testing.T) {
	l := slowlog.New(3, 0)
	for i := range 10 {
		l.Add(entry(fmt.Sprint("c", i), float64(i)))
		want := min(i+1, 3)
		if got := l.Len(); got != want {
			t.Fatalf("after %d Adds Len() = %d, want %d", i+1, got, want)
		}
		es := l.Entries()
		if len(es) != want {
			t.Fatalf("after %d Adds len(Entries()) = %d, want %d", i+1, len(es), want)
		}
		// Newest first, IDs from 0 in Add order, commands matching IDs.
		for k, e := range es {
			wantID := int64(i - k)
			if e.ID != wantID || e.Command != fmt.Sprint("c", wantID) || e.Phases["total"] != float64(wantID) {
				t.Fatalf("after %d Adds Entries()[%d] = id %d %q %v, want id %d", i+1, k, e.ID, e.Command, e.Phases, wantID)
			}
		}
	}
}

func TestResetKeepsIDs(t *testing.T) {
	l := slowlog.New(2, 0)
	for range 3 {
		l.Add(entry("get", 1))
	}
	l.Reset()
	if l.Len() != 0 || len(l.Entries()) != 0 {
		t.Fatalf("after Reset Len() = %d", l.Len())
	}
	l.Add(entry("get", 1))
	l.Add(entry("set", 1))
	if got := ids(l.Entries()); fmt.Sprint(got) != "[4 3]" {
		t.Fatalf("IDs after Reset = %v, want [4 3]", got)
	}
}

func TestAddCopiesAndStampsTime(t *testing.T) {
	l := slowlog.New(2, 0)
	phases := map[string]float64{"total": 0.5}
	buf := []byte("client-name")
	before := time.Now()
	l.Add(slowlog.Entry{Command: "get", ClientName: string(buf), Phases: phases})
	phases["total"] = 99 // the caller reuses its map
	es := l.Entries()
	if got := es[0].Phases["total"]; got != 0.5 {
		t.Errorf("Phases aliased the caller's map: total = %v", got)
	}
	if es[0].Time.Before(before) || es[0].Time.After(time.Now()) {
		t.Errorf("Time = %v, want now", es[0].Time)
	}
	es[0].Phases["total"] = 7 // the caller owns what Entries returns
	if got := l.Entries()[0].Phases["total"]; got != 0.5 {
		t.Errorf("Entries shares Phases with the Log: total = %v", got)
	}
	at := time.Date(2024, 1, 2, 3, 4, 5, 0, time.UTC)
	l.Add(slowlog.Entry{Command: "get", Time: at})
	if got := l.Entries()[0].Time; !got.Equal(at) {
		t.Errorf("Time = %v, want the caller's %v", got, at)
	}
}

func TestFirstKeyEscapingAndTruncation(t *testing.T) {
	long := strings.Repeat("k", 100)
	for _, tc := range []struct {
		name      string
		raw       string
		truncated bool // given to Add
		want      string
		wantTrunc bool
	}{
		{"empty", "", false, "", false},
		{"plain", "user:{42}:name", false, "user:{42}:name", false},
		{"controls and invalid bytes", "a\x00b\n\t\xff\x7f", false, `a\x00b\n\t\xff\x7f`, false},
		{"backslash and quote", `a\b"c`, false, `a\\b\"c`, false},
		{"printable utf-8 kept", "clé-日本", false, "clé-日本", false},
		{"exactly 64 bytes", long[:64], false, long[:64], false},
		{"65 bytes cut", long[:65], false, long[:64], true},
		{"100 bytes cut", long, false, long[:64], true},
		{"caller already cut", long[:64], true, long[:64], true},
		{"cut inside a rune", strings.Repeat("a", 63) + "é", false, strings.Repeat("a", 63) + `\xc3`, true},
		{"all binary cut", strings.Repeat("\x01", 80), false, strings.Repeat(`\x01`, 64), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := slowlog.New(1, 0)
			l.Add(slowlog.Entry{Command: "get", FirstKey: tc.raw, KeyTruncated: tc.truncated})
			e := l.Entries()[0]
			if e.FirstKey != tc.want || e.KeyTruncated != tc.wantTrunc {
				t.Fatalf("FirstKey, KeyTruncated = %q, %v; want %q, %v", e.FirstKey, e.KeyTruncated, tc.want, tc.wantTrunc)
			}
		})
	}
}

// FuzzFirstKey checks that Add keeps at most MaxKeyBytes bytes of any key,
// escaped so that strconv.Unquote gives them back, as printable UTF-8.
func FuzzFirstKey(f *testing.F) {
	for _, s := range []string{"", "k", "a\x00\xff\"\\", strings.Repeat("é", 40), "\u2028\U0010ffff"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		if len(raw) > 1<<12 {
			return
		}
		l := slowlog.New(1, 0)
		l.Add(slowlog.Entry{FirstKey: raw})
		e := l.Entries()[0]
		want := raw
		if len(want) > slowlog.MaxKeyBytes {
			want = want[:slowlog.MaxKeyBytes]
		}
		if e.KeyTruncated != (len(raw) > slowlog.MaxKeyBytes) {
			t.Fatalf("KeyTruncated = %v for %d bytes", e.KeyTruncated, len(raw))
		}
		got, err := strconv.Unquote(`"` + e.FirstKey + `"`)
		if err != nil || got != want {
			t.Fatalf("Unquote(%q) = %q, %v; want %q", e.FirstKey, got, err, want)
		}
		if !utf8.ValidString(e.FirstKey) {
			t.Fatalf("FirstKey %q is not UTF-8", e.FirstKey)
		}
		for _, r := range e.FirstKey {
			if !strconv.IsPrint(r) {
				t.Fatalf("FirstKey %q holds unprintable %U", e.FirstKey, r)
			}
		}
	})
}

func TestConcurrentAddAndRead(t *testing.T) {
	const writers, perWriter, capacity = 8, 2000, 64
	l := slowlog.New(capacity, 0)
	var wg sync.WaitGroup
	stop := make(chan struct{})
	var readers sync.WaitGroup
	for range 2 {
		readers.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				es := l.Entries()
				if len(es) > capacity || l.Len() > capacity {
					t.Errorf("%d entries held, capacity %d", len(es), capacity)
					return
				}
				rec := httptest.NewRecorder()
				l.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/slowlog?count=8", nil))
				if rec.Code != http.StatusOK {
					t.Errorf("GET /slowlog = %d", rec.Code)
					return
				}
				for i := 1; i < len(es); i++ {
					if es[i].ID >= es[i-1].ID {
						t.Errorf("IDs not decreasing: %v", ids(es))
						return
					}
				}
			}
		})
	}
	for w := range writers {
		wg.Go(func() {
			for i := range perWriter {
				e := entry("get", float64(i))
				e.Client = fmt.Sprintf("10.0.0.%d:5000", w)
				l.Add(e)
			}
		})
	}
	wg.Wait()
	close(stop)
	readers.Wait()

	es := l.Entries()
	if len(es) != capacity {
		t.Fatalf("len(Entries()) = %d, want %d", len(es), capacity)
	}
	// IDs are assigned under the lock in ring order: the newest capacity IDs,
	// contiguous.
	for i, e := range es {
		if want := int64(writers*perWriter - 1 - i); e.ID != want {
			t.Fatalf("Entries()[%d].ID = %d, want %d", i, e.ID, want)
		}
	}
}

func BenchmarkAdd(b *testing.B) {
	for _, tc := range []struct {
		name string
		key  string
	}{
		{"no-key", ""},
		{"key-16B", "user:{1234}:name"},
		{"key-1KiB", strings.Repeat("k", 1024)},
	} {
		b.Run(tc.name, func(b *testing.B) {
			l := slowlog.New(slowlog.DefaultCapacity, slowlog.DefaultThreshold)
			e := slowlog.Entry{
				Time:     time.Now(),
				Command:  "get",
				FirstKey: tc.key,
				Args:     2,
				Client:   "10.0.0.1:5000",
				Phases:   map[string]float64{"total": 0.012, "upstream": 0.011, "proxy": 0.001},
			}
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				l.Add(e)
			}
		})
	}
}

// TestRecordBuildsEntries: a Rec recorded without allocating reads back as
// the Entry the proxy used to build: the five phases in seconds (proxy =
// total - upstream, queue = upstream - service, service capped at
// upstream), the key cut and escaped, the client as ip:port, and IDs
// shared with Add in one sequence.
func TestRecordBuildsEntries(t *testing.T) {
	l := slowlog.New(4, 0)
	var key slowlog.KeyBuf
	key.Set([]byte("user:\x00" + strings.Repeat("k", 70)))
	r := slowlog.Rec{
		Command: "get", Args: 2, ClientName: "web-1", Key: key,
		Client:   netip.MustParseAddrPort("10.1.2.3:6000"),
		Total:    30 * time.Millisecond,
		Upstream: 20 * time.Millisecond,
		Service:  25 * time.Millisecond, // more than upstream: capped
	}
	if a := testing.AllocsPerRun(100, func() { l.Record(&r) }); a != 0 {
		t.Errorf("Record: %v allocations, want 0", a)
	}
	l.Add(entry("set", 0.02))
	es := l.Entries()
	if got := ids(es); fmt.Sprint(got) != "[101 100 99 98]" {
		t.Errorf("IDs %v, want [101 100 99 98] (101 Records, then one Add)", got)
	}
	e := es[1]
	want := map[string]float64{"total": 0.03, "upstream": 0.02, "proxy": 0.01, "service": 0.02, "queue": 0}
	for k, v := range want {
		if got := e.Phases[k]; got < v-1e-12 || got > v+1e-12 {
			t.Errorf("phase %s = %v, want %v", k, got, v)
		}
	}
	if len(e.Phases) != len(want) {
		t.Errorf("phases %v, want exactly %v", e.Phases, want)
	}
	wantKey := `user:\x00` + strings.Repeat("k", slowlog.MaxKeyBytes-6)
	if e.Command != "get" || e.Args != 2 || e.ClientName != "web-1" || e.Client != "10.1.2.3:6000" ||
		e.FirstKey != wantKey || !e.KeyTruncated {
		t.Errorf("entry %+v", e)
	}
	if time.Since(e.Time) > time.Minute || e.Time.After(time.Now()) {
		t.Errorf("Time %v, want about now", e.Time)
	}
	if es[0].Command != "set" || es[0].Client != "10.0.0.1:5000" {
		t.Errorf("the Add after the Records reads back as %+v", es[0])
	}
}
