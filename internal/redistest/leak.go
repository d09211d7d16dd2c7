package redistest

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Counts is a snapshot of the process's goroutines and open descriptors.
type Counts struct {
	Goroutines int
	FDs        map[int]string // fd -> readlink target
	stacks     map[int]string // goroutine id -> first stack frame
}

var warmOnce sync.Once

// warm initialises process-wide lazily created resources (the network
// poller's epoll and wake-up descriptors) so that a snapshot taken before
// the first network use does not count them as leaks later.
func warm() {
	warmOnce.Do(func() {
		if l, err := net.Listen("tcp", "127.0.0.1:0"); err == nil {
			_ = l.Close()
		}
	})
}

// FDCount returns the number of open descriptors of this process, from
// /proc/self/fd (the descriptor used to read the directory excluded); -1
// where /proc is not available.
func FDCount() int {
	fds := fdTargets()
	if fds == nil {
		return -1
	}
	return len(fds)
}

func fdTargets() map[int]string {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return nil
	}
	out := make(map[int]string, len(ents))
	for _, e := range ents {
		fd, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		target, err := os.Readlink(filepath.Join("/proc/self/fd", e.Name()))
		if err != nil {
			// The directory's own descriptor is gone by now.
			continue
		}
		out[fd] = target
	}
	return out
}

var goroutineHeader = regexp.MustCompile(`(?m)^goroutine ([0-9]+) \[[^\]]*\]:\n(.*)$`)

func goroutineStacks() (map[int]string, []byte) {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	out := map[int]string{}
	for _, m := range goroutineHeader.FindAllSubmatch(buf, -1) {
		id, _ := strconv.Atoi(string(m[1]))
		out[id] = string(m[2])
	}
	return out, buf
}

// Snapshot records the current goroutines and descriptors.
func Snapshot() Counts {
	warm()
	stacks, _ := goroutineStacks()
	return Counts{Goroutines: runtime.NumGoroutine(), FDs: fdTargets(), stacks: stacks}
}

// leakWait bounds how long CheckNoLeaks waits for counts to come back:
// closed connections and stopped servers finish their goroutines
// asynchronously.
const leakWait = 5 * time.Second

// idleWorker matches the stack of an idle worker of gnet's process-wide
// goroutine pool (ants, pkg/pool/goroutine.DefaultWorkerPool): the pool
// keeps idle workers for its ExpiryDuration (10 s) after their last task,
// by design, so they are not leaks of the test.
var idleWorker = regexp.MustCompile(`(?s)^goroutine [0-9]+ \[chan receive[^\]]*\]:\ngithub\.com/panjf2000/ants/v2\.\(\*goWorker\)\.run\.func1\(`)

// newGoroutines returns the stack dumps of goroutines that did not exist
// in before, leaving out idle pool workers.
func newGoroutines(before map[int]string) []string {
	_, all := goroutineStacks()
	var out []string
	for _, block := range bytes.Split(all, []byte("\n\n")) {
		m := goroutineHeader.FindSubmatch(block)
		if m == nil {
			continue
		}
		id, _ := strconv.Atoi(string(m[1]))
		if _, ok := before[id]; ok || idleWorker.Match(block) {
			continue
		}
		out = append(out, string(block))
	}
	return out
}

// CheckNoLeaks polls for up to 5 s until every goroutine alive now existed
// in before (idle workers of gnet's process-wide pool excepted: they
// expire on the pool's own 10 s schedule) and every descriptor open now was
// open before, and fails t with the new goroutines' stacks and the new
// descriptors otherwise. Call it from tests that do not run in parallel
// with others (a parallel test's goroutines would be counted).
func CheckNoLeaks(t testing.TB, before Counts) {
	t.Helper()
	deadline := time.Now().Add(leakWait)
	for {
		gs := newGoroutines(before.stacks)
		newFDs := diffFDs(before.FDs, fdTargets())
		if len(gs) == 0 && len(newFDs) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("redistest: leak: goroutines %d -> %d, %d new goroutines, new fds %v\n%s",
				before.Goroutines, runtime.NumGoroutine(), len(gs), newFDs, strings.Join(gs, "\n\n"))
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// CheckNoGrowth is CheckNoLeaks for a process still serving: it polls for
// up to 5 s until every goroutine alive now existed in before (idle pool
// workers excepted) and no more descriptors are open than in before (a
// long-lived connection may have been replaced by another meanwhile), and
// fails t otherwise.
func CheckNoGrowth(t testing.TB, before Counts) {
	t.Helper()
	deadline := time.Now().Add(leakWait)
	for {
		gs := newGoroutines(before.stacks)
		now := fdTargets()
		if len(gs) == 0 && len(now) <= len(before.FDs) {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("redistest: growth: %d new goroutines, descriptors %d -> %d (new: %v)\n%s",
				len(gs), len(before.FDs), len(now), diffFDs(before.FDs, now), strings.Join(gs, "\n\n"))
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// VerifyNoLeaks snapshots now and registers a cleanup that runs
// CheckNoLeaks. Call it first in a test, before starting servers or
// proxies, so that its cleanup runs after theirs (cleanups run last-in
// first-out).
func VerifyNoLeaks(t testing.TB) {
	t.Helper()
	before := Snapshot()
	t.Cleanup(func() { CheckNoLeaks(t, before) })
}

func diffFDs(before, now map[int]string) []string {
	var out []string
	for fd, target := range now {
		if old, ok := before[fd]; !ok || old != target {
			out = append(out, fmt.Sprintf("%d=%s", fd, target))
		}
	}
	sort.Strings(out)
	return out
}
