package main

import (
	"bytes"
	"errors"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/respmeter/respmeter/internal/check"
	"github.com/respmeter/respmeter/internal/redistest"
)

// execCheck runs newCheckCmd with args and returns its output and the exit
// code run would give, with stderr as run writes it.
func execCheck(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var out, errb bytes.Buffer
	cmd := newCheckCmd(&out, &errb)
	cmd.SetArgs(args)
	err := cmd.Execute()
	if err == nil {
		return out.String(), errb.String(), exitOK
	}
	var ee *exitError
	if !errors.As(err, &ee) {
		t.Fatalf("check returned %T %v, want *exitError", err, err)
	}
	if ee.err != nil {
		for _, line := range errorLines(ee.err) {
			errb.WriteString("respmeter: " + line + "\n")
		}
	}
	if ee.hint != "" {
		errb.WriteString(ee.hint + "\n")
	}
	return out.String(), errb.String(), ee.code
}

// checkSummaryRe matches the summary line of a clean run.
var checkSummaryRe = regexp.MustCompile(`(?m)^commands (\d+), mismatches 0, error replies \d+, connection errors 0, duration \S+ \(\d+ cmds/s\)$`)

func TestCheckCommand(t *testing.T) {
	s := redistest.Start(t)
	stdout, stderr, code := execCheck(t, "--target", s.Addr(), "--conns", "16", "--commands", "20000", "--depth", "32", "--seed", "5")
	if code != exitOK {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	m := checkSummaryRe.FindStringSubmatch(stdout)
	if m == nil || m[1] != "20000" {
		t.Fatalf("no summary line for 20000 commands in:\n%s", stdout)
	}
	if !strings.Contains(stdout, "seed 5, pub/sub on") || strings.Contains(stdout, "first mismatch") {
		t.Errorf("stdout:\n%s", stdout)
	}
	t.Logf("\n%s", stdout)
	if n := s.Do("DBSIZE").(int64); n != 0 {
		t.Errorf("%d keys left", n)
	}

	// No --seed: a random one is printed; --no-pubsub.
	stdout, _, code = execCheck(t, "--target", s.Addr(), "--conns", "4", "--commands", "500", "--no-pubsub")
	if code != exitOK || !regexp.MustCompile(`seed -?\d+, pub/sub off`).MatchString(stdout) || !checkSummaryRe.MatchString(stdout) {
		t.Errorf("exit %d, stdout:\n%s", code, stdout)
	}
}

func TestCheckCommandUnreachable(t *testing.T) {
	redistest.SkipIfUnavailable(t)
	stdout, stderr, code := execCheck(t, "--target", redistest.ClosedAddr(t), "--conns", "3", "--commands", "10")
	if code != exitFailure {
		t.Fatalf("exit %d, want %d\nstdout:\n%s\nstderr:\n%s", code, exitFailure, stdout, stderr)
	}
	if !strings.Contains(stdout, "connection errors 3") || !strings.Contains(stderr, "unreachable") {
		t.Errorf("stdout:\n%s\nstderr:\n%s", stdout, stderr)
	}
}

func TestCheckCommandUsage(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no target", nil, "--target HOST:PORT is required"},
		{"bad target", []string{"--target", "localhost"}, "--target \"localhost\""},
		{"conns", []string{"--target", "h:1", "--conns", "0"}, "--conns must be in 1..10000"},
		{"commands", []string{"--target", "h:1", "--commands", "-1"}, "--commands must be positive"},
		{"depth", []string{"--target", "h:1", "--depth", "0"}, "--depth must be in"},
		{"duration", []string{"--target", "h:1", "--duration", "-1s"}, "--duration must not be negative"},
		{"timeout", []string{"--target", "h:1", "--timeout", "0"}, "--timeout must be positive"},
		{"not a number", []string{"--target", "h:1", "--conns", "many"}, "invalid argument"},
		{"unknown flag", []string{"--target", "h:1", "--bogus"}, "unknown flag: --bogus"},
		{"argument", []string{"--target", "h:1", "extra"}, `unexpected argument "extra"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stdout, stderr, code := execCheck(t, tc.args...)
			if code != exitUsage || !strings.Contains(stderr, tc.want) || !strings.Contains(stderr, "--help' for usage.") {
				t.Errorf("exit %d, want %d with %q in stderr:\n%s", code, exitUsage, tc.want, stderr)
			}
			if stdout != "" {
				t.Errorf("stdout not empty:\n%s", stdout)
			}
		})
	}
}

// TestPrintSlotMismatches: the slot range and window of all mismatches,
// then the slots with the most, most first (ties in slot order).
func TestPrintSlotMismatches(t *testing.T) {
	ms := time.Millisecond
	var b strings.Builder
	printSlotMismatches(&b, []check.SlotMismatches{
		{Slot: 3, Mismatches: 2, First: 500 * ms, Last: 900 * ms},
		{Slot: 177, Mismatches: 7, First: 1200 * ms, Last: 2500 * ms},
		{Slot: 4999, Mismatches: 2, First: 700 * ms, Last: 1100 * ms},
	})
	want := "mismatches in 3 hash slots, 3 to 4999, seen from 0.500 s to 2.500 s of the run\n" +
		"  slot 177: 7 mismatches, 1.200 s to 2.500 s\n" +
		"  slot 3: 2 mismatches, 0.500 s to 0.900 s\n" +
		"  slot 4999: 2 mismatches, 0.700 s to 1.100 s\n"
	if b.String() != want {
		t.Errorf("got\n%s\nwant\n%s", b.String(), want)
	}
	b.Reset()
	printSlotMismatches(&b, nil)
	if b.Len() != 0 {
		t.Errorf("no mismatches printed %q", b.String())
	}
}
