package proxy_test

import (
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/respmeter/respmeter/internal/redistest"
	"github.com/respmeter/respmeter/proxy/proxytest"
)

// BenchmarkIdleConnections opens 10,000 idle client connections through an
// in-process proxy (each sends one PING so that its upstream connection is
// open too) and reports the proxy's resident memory per connection pair
// (client + upstream), in bytes: the "rss-B/conn" metric.
//
// The clients are bare sockets made with syscalls, so they add kernel
// memory but nothing to this process's RSS: the delta is the proxy's own
// cost (gnet connections, sessions, framers) plus the Go heap it implies.
// It raises RLIMIT_NOFILE (3 descriptors per pair: client, proxy side,
// upstream) and starts redis-server with a matching maxclients.
func BenchmarkIdleConnections(b *testing.B) {
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
		b.Fatal(err)
	}
	// 3 descriptors per pair live in this process. Where the hard limit
	// cannot be raised (a sandbox capping it at 20,000), fewer pairs are
	// opened; the figure is per pair either way.
	conns := 10000
	if want := uint64(3*conns + 1024); lim.Max < want {
		lim.Max = want // needs CAP_SYS_RESOURCE
		if unix.Setrlimit(unix.RLIMIT_NOFILE, &lim) != nil {
			_ = unix.Getrlimit(unix.RLIMIT_NOFILE, &lim)
			conns = int(lim.Max-1024) / 3
			b.Logf("RLIMIT_NOFILE hard limit %d: opening %d connection pairs instead of 10,000", lim.Max, conns)
		}
	}
	lim.Cur = lim.Max
	if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
		b.Fatal(err)
	}
	srv := redistest.Start(b, "--maxclients", strconv.Itoa(conns+100))
	p, set := proxytest.StartProxy(b, srv.Addr(), nil)
	addr := p.Addr()
	port, _ := strconv.Atoi(addr[strings.LastIndexByte(addr, ':')+1:])
	sa := &unix.SockaddrInet4{Port: port, Addr: [4]byte{127, 0, 0, 1}}
	ping := []byte("*1\r\n$4\r\nPING\r\n")

	for i := 0; i < b.N; i++ {
		runtime.GC()
		debug.FreeOSMemory()
		before := rss(b)
		fds := make([]int, 0, conns)
		buf := make([]byte, 16)
		for j := 0; j < conns; j++ {
			fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
			if err != nil {
				b.Fatalf("socket %d: %v", j, err)
			}
			if err := unix.Connect(fd, sa); err != nil {
				b.Fatalf("connect %d: %v", j, err)
			}
			if _, err := unix.Write(fd, ping); err != nil {
				b.Fatalf("write %d: %v", j, err)
			}
			_ = unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &unix.Timeval{Sec: 5})
			if n, err := unix.Read(fd, buf); err != nil || string(buf[:n]) != "+PONG\r\n" {
				b.Fatalf("conn %d: got %q, %v", j, buf[:n], err)
			}
			fds = append(fds, fd)
		}
		runtime.GC()
		debug.FreeOSMemory()
		time.Sleep(100 * time.Millisecond)
		after := rss(b)
		if got := set.Counters().UpstreamConns; got < int64(conns) {
			b.Fatalf("%d upstream connections open, want %d", got, conns)
		}
		b.ReportMetric(float64(after-before)/float64(conns), "rss-B/conn")
		for _, fd := range fds {
			_ = unix.Close(fd)
		}
	}
}

// rss returns this process's resident set size in bytes (/proc/self/status VmRSS).
func rss(tb testing.TB) int64 {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		tb.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			return kb * 1024
		}
	}
	tb.Fatal("no VmRSS in /proc/self/status")
	return 0
}
