package redistest

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"testing"
	"time"
)

func TestFrameLen(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want int
		bad  bool
	}{
		{"simple", "+OK\r\n", 5, false},
		{"error", "-ERR x\r\n", 8, false},
		{"int", ":12\r\n", 5, false},
		{"null bulk", "$-1\r\n", 5, false},
		{"empty bulk", "$0\r\n\r\n", 6, false},
		{"binary bulk", "$5\r\n\r\n*\x00\n\r\n", 11, false},
		{"null array", "*-1\r\n", 5, false},
		{"nested", "*2\r\n:1\r\n*2\r\n:2\r\n*1\r\n:3\r\n", 24, false},
		{"map", "%1\r\n+a\r\n:1\r\n", 12, false},
		{"push", ">2\r\n$10\r\ninvalidate\r\n_\r\n", 24, false},
		{"resp3 scalars", "#t\r\n", 4, false},
		{"verbatim", "=7\r\ntxt:abc\r\n", 13, false},
		{"partial line", "+OK\r", 0, false},
		{"partial bulk", "$5\r\nab", 0, false},
		{"partial nested", "*2\r\n:1\r\n*2\r\n:2\r\n", 0, false},
		{"trailing", "+OK\r\n+X", 5, false},
		{"bad type", "?x\r\n", 0, true},
		{"bad bulk len", "$x\r\n", 0, true},
		{"bulk without crlf", "$1\r\nabc", 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := FrameLen([]byte(tt.in))
			if (err != nil) != tt.bad || got != tt.want {
				t.Fatalf("FrameLen(%q) = %d, %v; want %d, bad=%v", tt.in, got, err, tt.want, tt.bad)
			}
		})
	}
}

// TestFrameLenSplits feeds every prefix of a reply stream: a prefix never
// yields a frame longer than itself, and the full stream splits back into
// the frames it was built from.
func TestFrameLenSplits(t *testing.T) {
	frames := []string{"+OK\r\n", "$3\r\na\r\n\r\n", "*2\r\n$1\r\nx\r\n%1\r\n:1\r\n_\r\n", "-ERR e\r\n", ">3\r\n$7\r\nmessage\r\n$1\r\nc\r\n$0\r\n\r\n"}
	stream := []byte(strings.Join(frames, ""))
	for i := 0; i <= len(stream); i++ {
		got, rest, err := SplitFrames(stream[:i])
		if err != nil {
			t.Fatalf("prefix %d: %v", i, err)
		}
		if n := len(bytes.Join(got, nil)) + len(rest); n != i {
			t.Fatalf("prefix %d: frames+rest cover %d bytes", i, n)
		}
	}
	got, rest, err := SplitFrames(stream)
	if err != nil || len(rest) != 0 || len(got) != len(frames) {
		t.Fatalf("SplitFrames = %d frames, rest %q, %v", len(got), rest, err)
	}
	for i := range frames {
		if string(got[i]) != frames[i] {
			t.Errorf("frame %d = %q, want %q", i, got[i], frames[i])
		}
	}
}

func TestCmd(t *testing.T) {
	got := string(Cmd("SET", "k", ""))
	if want := "*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$0\r\n\r\n"; got != want {
		t.Fatalf("Cmd = %q, want %q", got, want)
	}
}

func TestMaskHelloID(t *testing.T) {
	in := []byte("%2\r\n$2\r\nid\r\n:42\r\n$4\r\nmode\r\n$10\r\nstandalone\r\n")
	want := "%2\r\n$2\r\nid\r\n:<id>\r\n$4\r\nmode\r\n$10\r\nstandalone\r\n"
	if got := string(MaskHelloID(in)); got != want {
		t.Fatalf("MaskHelloID = %q", got)
	}
}

func TestStartPingDo(t *testing.T) {
	t.Parallel()
	s := Start(t)
	if got := s.Do("PING"); got != "PONG" {
		t.Fatalf("PING = %v", got)
	}
	if got := s.Do("CONFIG", "GET", "save"); fmt.Sprint(got) != "map[save:]" {
		t.Fatalf("CONFIG GET save = %v, want empty", got)
	}
	if got := s.Do("GET", "missing"); got != nil {
		t.Fatalf("GET missing = %v, want nil", got)
	}
	if s.Port() == 0 || s.Addr() != fmt.Sprintf("127.0.0.1:%d", s.Port()) {
		t.Fatalf("Addr %q Port %d", s.Addr(), s.Port())
	}
}

func TestStartExtraArgsAndPassword(t *testing.T) {
	t.Parallel()
	s := Start(t, "--enable-debug-command", "yes", "--requirepass", "pw-1")
	if got := s.Do("DEBUG", "SLEEP", "0"); got != "OK" {
		t.Fatalf("DEBUG SLEEP 0 = %v", got)
	}
	got, _ := Exchange(t, s.Addr(), [][]byte{Cmd("GET", "x")}, ExchangeOptions{Frames: 1})
	if !bytes.HasPrefix(got, []byte("-NOAUTH")) {
		t.Fatalf("unauthenticated GET = %q, want -NOAUTH", got)
	}
}

func TestKillRestart(t *testing.T) {
	t.Parallel()
	s := Start(t)
	s.Do("SET", "k", "v")
	port := s.Port()
	s.Kill()
	if _, err := DialConn(s.Addr(), time.Second); err == nil {
		t.Fatalf("dial after Kill succeeded")
	}
	s.Kill() // no-op on a dead server
	s.Restart()
	if s.Port() != port {
		t.Fatalf("port changed %d -> %d", port, s.Port())
	}
	c := Dial(t, s.Addr())
	c.Roundtrip(t, Cmd("GET", "k"), []byte("$-1\r\n")) // data set starts empty
}

func TestStopCont(t *testing.T) {
	t.Parallel()
	s := Start(t)
	c := Dial(t, s.Addr())
	s.Stop()
	c.Send(t, Cmd("PING"))
	if b := c.Quiet(200 * time.Millisecond); len(b) != 0 {
		t.Fatalf("stopped server answered %q", b)
	}
	s.Cont()
	c.Expect(t, []byte("+PONG\r\n"), 0)
}

func TestExchange(t *testing.T) {
	t.Parallel()
	s := Start(t)
	req := Cmds([]string{"SET", "k", "v"}, []string{"GET", "k"}, []string{"PING"})
	want := "+OK\r\n$1\r\nv\r\n+PONG\r\n"
	for _, tc := range []struct {
		name string
		o    ExchangeOptions
	}{
		{"want", ExchangeOptions{Want: len(want)}},
		{"until", ExchangeOptions{Until: []byte("+PONG\r\n")}},
		{"frames", ExchangeOptions{Frames: 3}},
		{"bytewise", ExchangeOptions{Bytewise: true, Frames: 3}},
		{"linger", ExchangeOptions{Frames: 3, Linger: 50 * time.Millisecond}},
	} {
		got, closed := Exchange(t, s.Addr(), [][]byte{req}, tc.o)
		if string(got) != want || closed {
			t.Errorf("%s: got %q closed=%v, want %q open", tc.name, got, closed, want)
		}
	}
	// Split writes with a delay, then QUIT: read until close.
	start := time.Now()
	got, closed := Exchange(t, s.Addr(), [][]byte{[]byte("*3\r\n$3\r\nSET\r\n$1\r\nk"), []byte("\r\n$1\r\nw\r\n"), Cmd("QUIT")},
		ExchangeOptions{Delay: 30 * time.Millisecond})
	if string(got) != "+OK\r\n+OK\r\n" || !closed {
		t.Fatalf("split+QUIT: got %q closed=%v", got, closed)
	}
	if el := time.Since(start); el < 60*time.Millisecond {
		t.Fatalf("delays not applied: %v", el)
	}
	// A stop condition that never holds ends at the timeout, still open.
	got, closed = Exchange(t, s.Addr(), [][]byte{Cmd("PING")}, ExchangeOptions{Until: []byte("nope"), Timeout: 100 * time.Millisecond})
	if string(got) != "+PONG\r\n" || closed {
		t.Fatalf("timeout: got %q closed=%v", got, closed)
	}
	// Half-close: the engine answers, then closes.
	got, closed = Exchange(t, s.Addr(), [][]byte{Cmd("GET", "k")}, ExchangeOptions{CloseWrite: true})
	if string(got) != "$1\r\nw\r\n" || !closed {
		t.Fatalf("half-close: got %q closed=%v", got, closed)
	}
}

func TestConnReadFrame(t *testing.T) {
	t.Parallel()
	s := Start(t)
	c := Dial(t, s.Addr())
	c.Send(t, Cmds([]string{"RPUSH", "l", "a", "b"}, []string{"LRANGE", "l", "0", "-1"}))
	f1, err1 := c.ReadFrame(0)
	f2, err2 := c.ReadFrame(0)
	if string(f1) != ":2\r\n" || string(f2) != "*2\r\n$1\r\na\r\n$1\r\nb\r\n" || err1 != nil || err2 != nil {
		t.Fatalf("frames %q %q (%v %v)", f1, f2, err1, err2)
	}
	if _, err := c.ReadFrame(50 * time.Millisecond); !errors.Is(err, ErrTimeout) {
		t.Fatalf("ReadFrame on idle conn: %v, want ErrTimeout", err)
	}
	c.Send(t, Cmd("QUIT"))
	b, closed := c.ReadToClose(time.Second)
	if string(b) != "+OK\r\n" || !closed {
		t.Fatalf("QUIT: %q closed=%v", b, closed)
	}
}

func TestRelaySlices(t *testing.T) {
	t.Parallel()
	s := Start(t)
	r := StartRelay(t, s.Addr(), RelayOptions{MinChunk: 3, MaxChunk: 9, Delay: time.Millisecond, Seed: 7})
	val := strings.Repeat("x", 500)
	req := Cmds([]string{"SET", "k", val}, []string{"GET", "k"})
	want := "+OK\r\n$500\r\n" + val + "\r\n"
	c, err := DialConn(r.Addr(), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Send(t, req)
	// Count the reads needed: slicing must spread the reply over many.
	reads := 0
	deadline := time.Now().Add(3 * time.Second)
	for len(c.Buffered()) < len(want) {
		if err := c.fill(deadline); err != nil {
			t.Fatalf("read: %v (got %d bytes)", err, len(c.Buffered()))
		}
		reads++
	}
	if string(c.Buffered()) != want {
		t.Fatalf("relayed bytes differ: %q", Trunc(c.Buffered()))
	}
	if reads < 10 {
		t.Fatalf("reply of %d bytes arrived in %d reads; slicing not applied", len(want), reads)
	}
}

func TestLeakHelpers(t *testing.T) {
	// Not parallel: it counts the whole process's goroutines.
	if _, err := os.Stat("/proc/self/fd"); err != nil {
		t.Skip("no /proc/self/fd")
	}
	before := Snapshot()
	f, err := os.Open(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	if n := FDCount(); n != len(before.FDs)+1 {
		t.Errorf("FDCount with one more file = %d, want %d", n, len(before.FDs)+1)
	}
	stop := make(chan struct{})
	go func() { <-stop }()
	// A fake TB captures the failure CheckNoLeaks must report.
	ft := &fakeTB{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		time.Sleep(100 * time.Millisecond)
		_ = f.Close()
		close(stop)
	}()
	CheckNoLeaks(ft, before) // resources go away within the wait
	<-done
	if ft.failed {
		t.Fatalf("CheckNoLeaks reported a leak that went away: %s", ft.msg)
	}
	// A goroutine that stays must be reported.
	before = Snapshot()
	hold := make(chan struct{})
	go func() { <-hold }()
	ft = &fakeTB{TB: t}
	checkStart := time.Now()
	CheckNoLeaks(ft, before)
	close(hold)
	if !ft.failed || !strings.Contains(ft.msg, "TestLeakHelpers") {
		t.Fatalf("CheckNoLeaks missed a stuck goroutine (failed=%v): %s", ft.failed, ft.msg)
	}
	if time.Since(checkStart) > leakWait+time.Second {
		t.Fatalf("CheckNoLeaks waited too long")
	}
}

type fakeTB struct {
	testing.TB
	failed bool
	msg    string
}

func (f *fakeTB) Helper() {}
func (f *fakeTB) Errorf(format string, args ...any) {
	f.failed = true
	f.msg = fmt.Sprintf(format, args...)
}

func TestClosedAddr(t *testing.T) {
	addr := ClosedAddr(t)
	if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		c.Close()
		t.Fatalf("something listens on %s", addr)
	}
}

func TestIdleWorkerPattern(t *testing.T) {
	idle := "goroutine 34 [chan receive]:\ngithub.com/panjf2000/ants/v2.(*goWorker).run.func1()\n\t/x/worker.go:69 +0xb4"
	busy := "goroutine 35 [IO wait]:\ninternal/poll.runtime_pollWait()\n\t/x.go:1\ngithub.com/panjf2000/ants/v2.(*goWorker).run.func1()"
	if !idleWorker.MatchString(idle) || idleWorker.MatchString(busy) {
		t.Fatalf("idleWorker pattern: idle %v busy %v", idleWorker.MatchString(idle), idleWorker.MatchString(busy))
	}
}

func TestVersionLess(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want bool
	}{
		{"7.0.15", "7.2", true}, {"7.2.4", "7.2", false}, {"8.0.2", "7.2", false},
		{"7.2", "7.2.0", false}, {"10.0", "9.9", false}, {"", "7.2", true},
	} {
		if got := versionLess(tc.a, tc.b); got != tc.want {
			t.Errorf("versionLess(%q, %q) = %v, want %v", tc.a, tc.b, got, tc.want)
		}
	}
}
