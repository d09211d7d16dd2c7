package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"github.com/respmeter/respmeter/internal/redistest"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/respmeter/respmeter/internal/goldenfile"
)

// runMainEnv, set to "1", makes the test binary run main instead of the
// tests: the CLI tests re-execute the binary this way
// (prometheus/prometheus:cmd/prometheus/main_test.go).
const runMainEnv = "GO_TEST_RESPMETER_RUN_MAIN"

// cliTimeout bounds every re-executed command.
const cliTimeout = 60 * time.Second

func TestMain(m *testing.M) {
	if os.Getenv(runMainEnv) == "1" {
		os.Exit(run(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

// syncBuffer is a bytes.Buffer safe for one writer and concurrent readers.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// proc is one re-executed respmeter process.
type proc struct {
	cmd            *exec.Cmd
	stdout, stderr *syncBuffer
	done           chan struct{} // closed once cmd has been waited for
	code           int           // exit code, valid after done
}

// childEnv returns the test's environment without RESPMETER_* variables,
// plus runMainEnv and extra ("KEY=value"; later entries win).
func childEnv(extra []string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "RESPMETER_") && !strings.HasPrefix(kv, runMainEnv+"=") {
			env = append(env, kv)
		}
	}
	env = append(env, runMainEnv+"=1")
	return append(env, extra...)
}

// start re-executes the test binary as respmeter with args and env, and
// kills it in t.Cleanup if it is still running then.
func start(t testing.TB, env []string, args ...string) *proc {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return startExe(t, exe, env, args...)
}

// startExe is start with the program exe: the test binary, or a respmeter
// built from another revision (which ignores runMainEnv).
func startExe(t testing.TB, exe string, env []string, args ...string) *proc {
	t.Helper()
	p := &proc{stdout: &syncBuffer{}, stderr: &syncBuffer{}, done: make(chan struct{})}
	p.cmd = exec.Command(exe, args...)
	p.cmd.Env = childEnv(env)
	p.cmd.Stdout, p.cmd.Stderr = p.stdout, p.stderr
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		err := p.cmd.Wait()
		p.code = 0
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			p.code = ee.ExitCode()
		} else if err != nil {
			p.code = -1
		}
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = p.cmd.Process.Kill()
			<-p.done
			t.Logf("killed respmeter %q\nstdout:\n%s\nstderr:\n%s", args, p.stdout, p.stderr)
		}
	})
	return p
}

// wait waits for p to exit and returns its exit code.
func (p *proc) wait(t testing.TB) int {
	t.Helper()
	select {
	case <-p.done:
		return p.code
	case <-time.After(cliTimeout):
		t.Fatalf("respmeter did not exit within %v\nstdout:\n%s\nstderr:\n%s", cliTimeout, p.stdout, p.stderr)
		return -1
	}
}

// signal sends sig to p.
func (p *proc) signal(t testing.TB, sig syscall.Signal) {
	t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		t.Fatalf("signal %v: %v", sig, err)
	}
}

// waitFor waits until re matches what p wrote to w (p.stdout or
// p.stderr) and returns the submatches; it fails t on timeout or exit.
func (p *proc) waitFor(t testing.TB, w *syncBuffer, re string) []string {
	t.Helper()
	rx := regexp.MustCompile(re)
	var m []string
	redistest.EventuallyEvery(t, cliTimeout, 10*time.Millisecond, func() error {
		select {
		case <-p.done:
			// Exited: one last look, the output may have landed just
			// before the exit.
			if m = rx.FindStringSubmatch(w.String()); m == nil {
				t.Fatalf("no match for %q (exited)\nstdout:\n%s\nstderr:\n%s", re, p.stdout, p.stderr)
			}
			return nil
		default:
		}
		if m = rx.FindStringSubmatch(w.String()); m == nil {
			return fmt.Errorf("no match for %q\nstdout:\n%s\nstderr:\n%s", re, p.stdout, p.stderr)
		}
		return nil
	})
	return m
}

// runCLI runs respmeter with args and env to completion.
func runCLI(t *testing.T, env []string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	p := start(t, env, args...)
	code = p.wait(t)
	return p.stdout.String(), p.stderr.String(), code
}

// checkGolden compares got with testdata/name (-update rewrites it).
func checkGolden(t *testing.T, name, got string) {
	t.Helper()
	goldenfile.Check(t, "testdata/"+name, []byte(got))
}

func TestHelp(t *testing.T) {
	for _, tc := range []struct {
		golden string
		args   []string
	}{
		{"help_root.golden", []string{"--help"}},
		{"help_proxy.golden", []string{"proxy", "--help"}},
		{"help_demo.golden", []string{"demo", "--help"}},
		{"help_version.golden", []string{"version", "--help"}},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			t.Parallel()
			stdout, stderr, code := runCLI(t, nil, tc.args...)
			if code != exitOK || stderr != "" {
				t.Fatalf("exit %d, stderr:\n%s", code, stderr)
			}
			checkGolden(t, tc.golden, stdout)
			// "help <cmd>" says the same as "<cmd> --help".
			if len(tc.args) == 2 {
				alt, _, code := runCLI(t, nil, "help", tc.args[0])
				if code != exitOK || alt != stdout {
					t.Errorf("respmeter help %s: exit %d, output differs from --help:\n%s", tc.args[0], code, alt)
				}
			}
		})
	}
}

func TestUsageErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want string // in stderr
	}{
		{"no command", nil, "Available Commands:"},
		{"unknown command", []string{"proxx"}, `unknown command "proxx" for "respmeter" (did you mean "proxy"?)`},
		{"unknown flag", []string{"proxy", "--lisen", "x"}, "unknown flag: --lisen (did you mean --listen?)"},
		{"flag typo", []string{"proxy", "--listne", "x"}, "unknown flag: --listne (did you mean --listen?)"},
		{"bad int", []string{"proxy", "--loops", "many"}, `invalid argument "many" for "--loops" flag`},
		{"bad duration", []string{"proxy", "--drain-timeout", "5"}, `invalid argument "5" for "--drain-timeout" flag`},
		{"bad bool", []string{"proxy", "--measure=maybe"}, `invalid argument "maybe" for "--measure" flag`},
		{"negative loops", []string{"proxy", "--loops", "-1"}, `respmeter: --loops: key "loops": must be >= 0, got -1`},
		{"bad listen", []string{"proxy", "--listen", "6380"}, `respmeter: --listen: key "listen": must be host:port or "off", got "6380"`},
		{"both listeners off", []string{"proxy", "--listen", "off"},
			`respmeter: --listen: key "listen": off needs tls_listen: with both listeners off no client could connect`},
		{"bad level", []string{"proxy", "--log-level", "loud"}, `--log-level: key "log_level": must be one of debug|info|warn|error, got "loud"`},
		{"loop to self", []string{"proxy", "--listen", ":6379", "--upstream", "127.0.0.1:6379"}, `--upstream: key "upstream": must differ from listen`},
		{"proxy argument", []string{"proxy", "extra"}, `unexpected argument "extra"`},
		{"bad size unit", []string{"proxy", "--client-output-limit", "64M"},
			`invalid argument "64M" for "--client-output-limit" flag: must be a size in bytes such as 1048576, "512KiB", "64MiB" or "1GiB"`},
		{"negative size", []string{"proxy", "--client-query-limit", "-1"},
			`invalid argument "-1" for "--client-query-limit" flag: must be >= 0 (0 means unlimited), got "-1"`},
		{"fractional size", []string{"proxy", "--client-query-limit=1.5GiB"}, `invalid argument "1.5GiB" for "--client-query-limit" flag`},
		{"negative max clients", []string{"proxy", "--max-clients", "-1"}, `respmeter: --max-clients: key "max_clients": must be >= 0 (0 means unlimited), got -1`},
		{"bad max clients", []string{"proxy", "--max-clients", "lots"}, `invalid argument "lots" for "--max-clients" flag`},
		{"negative probe", []string{"proxy", "--probe-interval", "-1s"}, `respmeter: --probe-interval: key "probe_interval": must be >= 0 (0 disables), got -1s`},
		{"tiny poll", []string{"proxy", "--engine-poll", "1us"}, `respmeter: --engine-poll: key "engine_poll": must be 0 (off) or at least 10ms, got 1µs`},
		{"unitless threshold", []string{"proxy", "--slowlog-threshold", "10"}, `invalid argument "10" for "--slowlog-threshold" flag`},
		{"zero slowlog", []string{"proxy", "--slowlog-len", "0"}, `respmeter: --slowlog-len: key "slowlog_len": must be > 0, got 0`},
		{"zero hdr interval", []string{"proxy", "--hdr-interval", "0s"}, `respmeter: --hdr-interval: key "hdr_interval": must be > 0, got 0s`},
		{"hdr log without file", []string{"proxy", "--hdr-log"}, `flag needs an argument: --hdr-log`},
		{"bad route", []string{"proxy", "--route", "cluster"}, `respmeter: --route: key "route": must be one of none|slots|pinned|facade, got "cluster"`},
		{"route without shards", []string{"proxy", "--route", "slots"},
			`respmeter: --route: key "route": route slots needs shards (standalone engines) or cluster (a cluster node)`},
		{"shards without route", []string{"proxy", "--shards", "127.0.0.1:7000"},
			`respmeter: --shards: key "shards": needs route slots, pinned or facade, got route "none"`},
		{"cluster without route", []string{"proxy", "--cluster", "127.0.0.1:7000"},
			`respmeter: --cluster: key "cluster": needs route slots, pinned or facade, got route "none"`},
		{"shards and cluster", []string{"proxy", "--route", "pinned", "--shards", "127.0.0.1:7000", "--cluster", "127.0.0.1:7001"},
			`respmeter: --cluster: key "cluster": give shards or cluster, not both (route pinned)`},
		{"pin-by with slots", []string{"proxy", "--route", "slots", "--shards", "127.0.0.1:7000", "--pin-by", "first-key"},
			`respmeter: --pin-by: key "pin_by": needs route pinned, got route "slots"`},
		{"bad pin-by", []string{"proxy", "--route", "pinned", "--shards", "127.0.0.1:7000", "--pin-by", "random"},
			`respmeter: --pin-by: key "pin_by": must be one of connection|first-key, got "random"`},
		{"empty shard", []string{"proxy", "--route", "slots", "--shards", "127.0.0.1:7000,,127.0.0.1:7001"},
			`respmeter: --shards: key "shards": must be a comma-separated list of host:port such as "127.0.0.1:7000,127.0.0.1:7001", got "127.0.0.1:7000,,127.0.0.1:7001" (entry 2 is empty)`},
		{"duplicate shard", []string{"proxy", "--route", "slots", "--shards", "127.0.0.1:7000", "--shards", "127.0.0.1:7000"},
			`respmeter: --shards: key "shards": entry 2 repeats entry 1 ("127.0.0.1:7000")`},
		{"shard is the listener", []string{"proxy", "--route", "slots", "--listen", ":7001", "--shards", "127.0.0.1:7000,localhost:7001"},
			`respmeter: --shards: key "shards": entry 2: "localhost:7001" is the listen address: the proxy would connect to itself`},
		{"bad cluster", []string{"proxy", "--route", "slots", "--cluster", "7000"}, `respmeter: --cluster: key "cluster": must be host:port, got "7000"`},
		{"tiny topology refresh", []string{"proxy", "--topology-refresh", "10ms"},
			`respmeter: --topology-refresh: key "topology_refresh": must be at least 1s, got 10ms`},
		{"unitless topology refresh", []string{"proxy", "--topology-refresh", "30"}, `invalid argument "30" for "--topology-refresh" flag`},
		{"bad upstream mode", []string{"proxy", "--upstream-mode", "multiplexed"},
			`respmeter: --upstream-mode: key "upstream_mode": must be one of private|shared, got "multiplexed"`},
		{"shared with pinned", []string{"proxy", "--route", "pinned", "--shards", "127.0.0.1:7000", "--upstream-mode", "shared"},
			`respmeter: --upstream-mode: key "upstream_mode": shared needs route none or slots, got route "pinned"`},
		{"negative upstream conns", []string{"proxy", "--upstream-mode", "shared", "--upstream-conns", "-1"},
			`respmeter: --upstream-conns: key "upstream_conns": must be >= 0 (0 means 1), got -1`},
		{"bad upstream conns", []string{"proxy", "--upstream-conns", "two"}, `invalid argument "two" for "--upstream-conns" flag`},
		{"unknown cipher", []string{"proxy", "--upstream-tls", "--upstream-tls-ciphers", "AES128-SHA256:AES256-SHA256"},
			`respmeter: --upstream-tls-ciphers: key "upstream_tls_ciphers": tls: cipher "AES256-SHA256": not a TLS 1.2 cipher suite Go's crypto/tls implements`},
		{"cipher string keyword", []string{"proxy", "--upstream-tls", "--upstream-tls-ciphers", "HIGH:!aNULL"}, `key "upstream_tls_ciphers": tls: cipher "HIGH": not a TLS 1.2 cipher suite`},
		{"TLS 1.0", []string{"proxy", "--upstream-tls", "--upstream-tls-protocols", "TLSv1 TLSv1.2"},
			`respmeter: --upstream-tls-protocols: key "upstream_tls_protocols": tls: protocol TLSv1: respmeter speaks TLS 1.2 and 1.3 only`},
		{"TLS 1.3 cipher in tls-ciphers", []string{"proxy", "--tls-listen", "127.0.0.1:0", "--tls-cert-file", "c", "--tls-key-file", "k", "--tls-auth-clients", "no",
			"--tls-ciphers", "TLS_AES_128_GCM_SHA256"}, `key "tls_ciphers": tls: cipher "TLS_AES_128_GCM_SHA256" is a TLS 1.3 suite (redis.conf's tls-ciphersuites), which Go's crypto/tls cannot restrict`},
		{"client ciphers without listener", []string{"proxy", "--tls-ciphers", "AES128-SHA"}, `key "tls_ciphers": only with tls_listen or facade_tls`},
		{"tls-ciphersuites", []string{"proxy", "--tls-ciphersuites", "TLS_AES_128_GCM_SHA256"},
			"unknown flag: --tls-ciphersuites (tls: TLS 1.3 cipher suites cannot be restricted: Go's crypto/tls always offers TLS_AES_128_GCM_SHA256, TLS_AES_256_GCM_SHA384, TLS_CHACHA20_POLY1305_SHA256"},
		{"upstream-tls-ciphersuites", []string{"proxy", "--upstream-tls-ciphersuites=TLS_AES_128_GCM_SHA256"}, "unknown flag: --upstream-tls-ciphersuites (tls: TLS 1.3 cipher suites cannot be restricted"},
		{"check tls-ciphersuites", []string{"check", "--tls", "--tls-ciphersuites", "TLS_AES_128_GCM_SHA256"}, "unknown flag: --tls-ciphersuites (tls: TLS 1.3 cipher suites cannot be restricted"},
		{"check unknown cipher", []string{"check", "--target", "127.0.0.1:1", "--tls", "--tls-ciphers", "AES256-SHA256"}, `--tls-ciphers: tls: cipher "AES256-SHA256": not a TLS 1.2 cipher suite`},
		{"check ciphers without tls", []string{"check", "--target", "127.0.0.1:1", "--tls-ciphers", "AES128-SHA"}, "--tls-ciphers needs --tls"},
		{"replay ciphers without tls", []string{"replay", "x.respcap", "--target", "127.0.0.1:1", "--tls-ciphers", "AES128-SHA"}, "--tls-ciphers needs --tls"},
		{"demo conns", []string{"demo", "--conns", "0"}, "--conns must be in 1..256, got 0"},
		{"demo duration", []string{"demo", "--duration", "0s"}, "--duration must be in (0, 1h0m0s], got 0s"},
		{"version argument", []string{"version", "x"}, `unexpected argument "x"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			stdout, stderr, code := runCLI(t, nil, tc.args...)
			if code != exitUsage {
				t.Errorf("exit %d, want %d", code, exitUsage)
			}
			if !strings.Contains(stderr, tc.want) {
				t.Errorf("stderr does not contain %q:\n%s", tc.want, stderr)
			}
			// Configuration errors are self-explanatory; command-line ones get a hint.
			if wantHint := tc.args != nil && !strings.Contains(tc.want, `key "`); wantHint != strings.Contains(stderr, "--help' for usage.") {
				t.Errorf("want --help hint: %v; stderr:\n%s", wantHint, stderr)
			}
			if stdout != "" {
				t.Errorf("stdout not empty:\n%s", stdout)
			}
		})
	}
}

func TestBadConfigFile(t *testing.T) {
	dir := t.TempDir()
	bad := dir + "/bad.yaml"
	writeFile(t, bad, "upstream: 127.0.0.1:6379\nloops: -1\nlisen: 127.0.0.1:6381\ndrain_timeout: 5\n")
	bad2 := dir + "/bad2.yaml"
	writeFile(t, bad2, "# the settings added with the probe, poller, slow log and verdict\n"+
		"client_output_limit: 64 megs\nclient_query_limit: -1\nmax_clients: -1\nprobe_interval: -100ms\n"+
		"engine_poll: 5\nslowlog_threshold: [10ms]\nslowlog_len: 0\nhdr_log: {path: x}\nhdr_interval: 1ms\n")
	bad3 := dir + "/bad3.yaml"
	writeFile(t, bad3, "# the routing keys\nroute: cluster\nshards:\n  - 127.0.0.1:7000\n  - \"7001\"\n  - 127.0.0.1:7000\n"+
		"topology_refresh: 30\n")
	bad4 := dir + "/bad4.yaml"
	writeFile(t, bad4, "shards: [127.0.0.1:7000]\npin_by: connection\n")
	bad5 := dir + "/bad5.yaml"
	writeFile(t, bad5, "# the upstream mode keys\nroute: pinned\nshards: [127.0.0.1:7000]\nupstream_mode: shared\nupstream_conns: -2\n")
	bad6 := dir + "/bad6.yaml"
	writeFile(t, bad6, "upstream_mode: mux\nupstream_conns: 1.5\n")
	for _, tc := range []struct {
		name string
		env  []string
		args []string
		want []string
	}{
		{"flag", nil, []string{"proxy", "--config", bad}, []string{
			"respmeter: " + bad + `:2: key "loops": must be >= 0, got -1`,
			"respmeter: " + bad + `:3: unknown key "lisen" (did you mean "listen"?)`,
			"respmeter: " + bad + `:4: key "drain_timeout": must be a duration such as "250ms" or "5s", got "5"`,
		}},
		{"env", []string{"RESPMETER_CONFIG=" + bad}, []string{"proxy"}, []string{
			bad + `:2: key "loops": must be >= 0, got -1`,
		}},
		{"check", nil, []string{"proxy", "--check", "--config", bad}, []string{
			bad + `:2: key "loops": must be >= 0, got -1`,
		}},
		{"new keys", nil, []string{"proxy", "--config", bad2}, []string{
			"respmeter: " + bad2 + `:2: key "client_output_limit": must be a size in bytes such as 1048576, "512KiB", "64MiB" or "1GiB" (KB/MB/GB are powers of 1000), got "64 megs"`,
			"respmeter: " + bad2 + `:3: key "client_query_limit": must be >= 0 (0 means unlimited), got "-1"`,
			"respmeter: " + bad2 + `:4: key "max_clients": must be >= 0 (0 means unlimited), got -1`,
			"respmeter: " + bad2 + `:5: key "probe_interval": must be >= 0 (0 disables), got -100ms`,
			"respmeter: " + bad2 + `:6: key "engine_poll": must be a duration such as "250ms" or "5s", got "5"`,
			"respmeter: " + bad2 + `:7: key "slowlog_threshold": must be a duration such as "250ms" or "5s", got a list`,
			"respmeter: " + bad2 + `:8: key "slowlog_len": must be > 0, got 0`,
			"respmeter: " + bad2 + `:9: key "hdr_log": must be a string, got a mapping`,
			"respmeter: " + bad2 + `:10: key "hdr_interval": must be at least 10ms, got 1ms`,
		}},
		{"routing keys", nil, []string{"proxy", "--config", bad3}, []string{
			"respmeter: " + bad3 + `:2: key "route": must be one of none|slots|pinned|facade, got "cluster"`,
			"respmeter: " + bad3 + `:5: key "shards": entry 2: must be host:port, got "7001"`,
			"respmeter: " + bad3 + `:6: key "shards": entry 3 repeats entry 1 ("127.0.0.1:7000")`,
			"respmeter: " + bad3 + `:7: key "topology_refresh": must be a duration such as "250ms" or "5s", got "30"`,
		}},
		{"routing combinations", nil, []string{"proxy", "--config", bad4}, []string{
			"respmeter: " + bad4 + `:1: key "shards": needs route slots, pinned or facade, got route "none"`,
			"respmeter: " + bad4 + `:2: key "pin_by": needs route pinned, got route "none"`,
		}},
		{"upstream mode keys", nil, []string{"proxy", "--config", bad5}, []string{
			"respmeter: " + bad5 + `:4: key "upstream_mode": shared needs route none or slots, got route "pinned"`,
			"respmeter: " + bad5 + `:5: key "upstream_conns": must be >= 0 (0 means 1), got -2`,
		}},
		{"upstream mode values", nil, []string{"proxy", "--config", bad6}, []string{
			"respmeter: " + bad6 + `:1: key "upstream_mode": must be one of private|shared, got "mux"`,
			"respmeter: " + bad6 + `:2: key "upstream_conns": must be an integer, got "1.5"`,
		}},
		// The environment and flags cannot repair the file.
		{"upstream mode file checked before the flags", nil, []string{"proxy", "--config", bad5, "--route", "slots", "--upstream-conns", "1"}, []string{
			"respmeter: " + bad5 + `:4: key "upstream_mode": shared needs route none or slots, got route "pinned"`,
		}},
		// The file is checked on its own, before the flags apply.
		{"file checked before the flags", nil, []string{"proxy", "--config", bad4, "--route", "pinned"}, []string{
			"respmeter: " + bad4 + `:1: key "shards": needs route slots, pinned or facade, got route "none"`,
		}},
		{"missing", nil, []string{"proxy", "--config", dir + "/nope.yaml"}, []string{
			"respmeter: configs: open " + dir + "/nope.yaml: no such file or directory",
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, stderr, code := runCLI(t, tc.env, tc.args...)
			if code != exitUsage {
				t.Errorf("exit %d, want %d", code, exitUsage)
			}
			for _, w := range tc.want {
				if !strings.Contains(stderr, w) {
					t.Errorf("stderr does not contain %q:\n%s", w, stderr)
				}
			}
		})
	}
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestPrecedence checks defaults < file < environment < explicit flags,
// through --check, which prints the merged configuration.
func TestPrecedence(t *testing.T) {
	dir := t.TempDir()
	file := dir + "/p.yaml"
	writeFile(t, file, "listen: 127.0.0.1:7001\nupstream: 10.0.0.1:6379\nloops: 2\nlog_level: debug\nmeasure: false\n")
	file3 := dir + "/p3.yaml"
	writeFile(t, file3, "route: slots\nshards: [127.0.0.1:7000, 127.0.0.1:7001]\ntopology_refresh: 10s\n")
	file4 := dir + "/p4.yaml"
	writeFile(t, file4, "upstream_mode: shared\nupstream_conns: 2\n")
	file2 := dir + "/p2.yaml"
	writeFile(t, file2, "client_output_limit: 512KiB\nclient_query_limit: 100MB\nmax_clients: 0\nprobe_interval: 0s\n"+
		"engine_poll: 1s\nslowlog_threshold: -1s\nslowlog_len: 16\nhdr_log: /tmp/from-file.hlog\nhdr_interval: 2s\n")
	for _, tc := range []struct {
		name string
		env  []string
		args []string
		want []string
	}{
		{"defaults", nil, nil, []string{
			"# configuration valid; sources: defaults\n", "listen: 127.0.0.1:6380\n", "loops: 0\n", "measure: true\n",
		}},
		{"file", nil, []string{"--config", file}, []string{
			"sources: defaults, " + file + "\n", "listen: 127.0.0.1:7001\n", "upstream: 10.0.0.1:6379\n", "loops: 2\n",
		}},
		{"env over file", []string{"RESPMETER_LISTEN=127.0.0.1:7002", "RESPMETER_LOOPS=3", "RESPMETER_MEASURE=true", "RESPMETER_DRAIN_TIMEOUT=750ms", "RESPMETER_ADMIN="},
			[]string{"--config", file}, []string{
				"sources: defaults, " + file + ", RESPMETER_LISTEN, RESPMETER_LOOPS, RESPMETER_MEASURE, RESPMETER_DRAIN_TIMEOUT\n",
				"listen: 127.0.0.1:7002\n", "upstream: 10.0.0.1:6379\n", "admin: 127.0.0.1:9121\n", "loops: 3\n",
				"measure: true\n", "drain_timeout: 750ms\n", "log_level: debug\n",
			}},
		{"flags over env", []string{"RESPMETER_CONFIG=" + file, "RESPMETER_LISTEN=127.0.0.1:7002", "RESPMETER_LOOPS=3"},
			[]string{"--loops", "4", "--measure=true", "--dial-timeout", "1s", "--admin", "off"}, []string{
				"listen: 127.0.0.1:7002\n", "loops: 4\n", "measure: true\n", "dial_timeout: 1s\n", "admin: \"off\"\n", "log_level: debug\n",
			}},
		{"explicit default flag wins", []string{"RESPMETER_LOOPS=3"}, []string{"--loops", "0"}, []string{"loops: 0\n"}},
		{"new keys defaults", nil, nil, []string{
			"client_output_limit: 64MiB\n", "client_query_limit: 1GiB\n", "max_clients: 10000\n",
			"probe_interval: 100ms\n", "engine_poll: 1s\n", "slowlog_threshold: 10ms\n", "slowlog_len: 128\n",
			"hdr_log: \"\"\n", "hdr_interval: 1s\n",
		}},
		{"new keys from the file", nil, []string{"--config", file2}, []string{
			"client_output_limit: 512KiB\n", "client_query_limit: 100000000\n", "max_clients: 0\n",
			"probe_interval: 0s\n", "engine_poll: 1s\n", "slowlog_threshold: -1s\n", "slowlog_len: 16\n",
			"hdr_log: /tmp/from-file.hlog\n", "hdr_interval: 2s\n",
		}},
		{"new keys from env over the file", []string{
			"RESPMETER_CONFIG=" + file2, "RESPMETER_CLIENT_OUTPUT_LIMIT=1MB", "RESPMETER_CLIENT_QUERY_LIMIT=0",
			"RESPMETER_MAX_CLIENTS=5", "RESPMETER_PROBE_INTERVAL=20ms", "RESPMETER_ENGINE_POLL=0s",
			"RESPMETER_SLOWLOG_THRESHOLD=0s", "RESPMETER_SLOWLOG_LEN=3", "RESPMETER_HDR_LOG=/tmp/from-env.hlog",
			"RESPMETER_HDR_INTERVAL=250ms",
		}, nil, []string{
			"RESPMETER_CLIENT_OUTPUT_LIMIT, RESPMETER_CLIENT_QUERY_LIMIT, RESPMETER_MAX_CLIENTS, RESPMETER_PROBE_INTERVAL, " +
				"RESPMETER_ENGINE_POLL, RESPMETER_SLOWLOG_THRESHOLD, RESPMETER_SLOWLOG_LEN, RESPMETER_HDR_LOG, RESPMETER_HDR_INTERVAL\n",
			"client_output_limit: 1000000\n", "client_query_limit: 0\n", "max_clients: 5\n",
			"probe_interval: 20ms\n", "engine_poll: 0s\n", "slowlog_threshold: 0s\n", "slowlog_len: 3\n",
			"hdr_log: /tmp/from-env.hlog\n", "hdr_interval: 250ms\n",
		}},
		{"new keys from flags over env", []string{
			"RESPMETER_CONFIG=" + file2, "RESPMETER_CLIENT_OUTPUT_LIMIT=1MB", "RESPMETER_MAX_CLIENTS=5", "RESPMETER_HDR_LOG=/tmp/from-env.hlog",
		}, []string{
			"--client-output-limit", "2GiB", "--client-query-limit", "1024", "--max-clients", "7", "--probe-interval", "50ms",
			"--engine-poll", "200ms", "--slowlog-threshold", "-1ms", "--slowlog-len", "9", "--hdr-log", "/tmp/from-flag.hlog",
			"--hdr-interval", "200ms",
		}, []string{
			"client_output_limit: 2GiB\n", "client_query_limit: 1KiB\n", "max_clients: 7\n",
			"probe_interval: 50ms\n", "engine_poll: 200ms\n", "slowlog_threshold: -1ms\n", "slowlog_len: 9\n",
			"hdr_log: /tmp/from-flag.hlog\n", "hdr_interval: 200ms\n",
		}},
		{"routing defaults", nil, nil, []string{
			"upstream: 127.0.0.1:6379\nroute: none\nshards: []\nshard_zones: []\ncluster: \"\"\nfacade_listen: []\ntopology_refresh: 30s\npin_by: \"\"\n",
		}},
		{"routing from the file", nil, []string{"--config", file3}, []string{
			"sources: defaults, " + file3 + "\n",
			"route: slots\nshards:\n    - 127.0.0.1:7000\n    - 127.0.0.1:7001\nshard_zones: []\ncluster: \"\"\nfacade_listen: []\ntopology_refresh: 10s\npin_by: \"\"\n",
		}},
		{"routing from env over the file", []string{"RESPMETER_CONFIG=" + file3, "RESPMETER_ROUTE=pinned",
			"RESPMETER_SHARDS=127.0.0.1:7100, 127.0.0.1:7101,127.0.0.1:7102", "RESPMETER_PIN_BY=first-key", "RESPMETER_TOPOLOGY_REFRESH=1m"}, nil, []string{
			"sources: defaults, " + file3 + ", RESPMETER_ROUTE, RESPMETER_SHARDS, RESPMETER_TOPOLOGY_REFRESH, RESPMETER_PIN_BY\n",
			"route: pinned\nshards:\n    - 127.0.0.1:7100\n    - 127.0.0.1:7101\n    - 127.0.0.1:7102\nshard_zones: []\ncluster: \"\"\nfacade_listen: []\ntopology_refresh: 1m0s\npin_by: first-key\n",
		}},
		{"routing from flags over env", []string{"RESPMETER_CONFIG=" + file3, "RESPMETER_SHARDS=127.0.0.1:7100", "RESPMETER_PIN_BY=first-key"},
			[]string{"--route", "pinned", "--shards", "127.0.0.1:7200,127.0.0.1:7201", "--shards", "127.0.0.1:7202", "--pin-by", "connection",
				"--topology-refresh", "2s"}, []string{
				"RESPMETER_SHARDS, RESPMETER_PIN_BY, --route, --shards, --pin-by, --topology-refresh\n",
				"route: pinned\nshards:\n    - 127.0.0.1:7200\n    - 127.0.0.1:7201\n    - 127.0.0.1:7202\nshard_zones: []\ncluster: \"\"\nfacade_listen: []\ntopology_refresh: 2s\npin_by: connection\n",
			}},
		{"shard zones from env", []string{"RESPMETER_CONFIG=" + file3, "RESPMETER_SHARD_ZONES=eu-1a,eu-1b"}, nil, []string{
			"sources: defaults, " + file3 + ", RESPMETER_SHARD_ZONES\n",
			"shards:\n    - 127.0.0.1:7000\n    - 127.0.0.1:7001\nshard_zones:\n    - eu-1a\n    - eu-1b\ncluster: \"\"\n",
		}},
		{"shard zones from flags over env", []string{"RESPMETER_CONFIG=" + file3, "RESPMETER_SHARD_ZONES=eu-1a,eu-1b"},
			[]string{"--shard-zones", "us-2a,us-2b"}, []string{
				"RESPMETER_SHARD_ZONES, --shard-zones\n",
				"shard_zones:\n    - us-2a\n    - us-2b\n",
			}},
		{"cluster flag with shards cleared", []string{"RESPMETER_CONFIG=" + file3, "RESPMETER_PIN_BY=first-key"},
			[]string{"--shards=", "--cluster", "10.0.0.5:7000", "--pin-by="}, []string{
				"route: slots\nshards: []\nshard_zones: []\ncluster: 10.0.0.5:7000\nfacade_listen: []\ntopology_refresh: 10s\npin_by: \"\"\n",
			}},
		{"routed: the default upstream may be the listen address", nil,
			[]string{"--listen", ":6379", "--route", "slots", "--shards", "10.0.0.1:6379"}, []string{
				"listen: :6379\nupstream: 127.0.0.1:6379\nroute: slots\nshards:\n    - 10.0.0.1:6379\n",
			}},
		{"upstream mode defaults", nil, nil, []string{"pin_by: \"\"\nupstream_mode: private\nupstream_conns: 1\n"}},
		{"upstream mode from the file", nil, []string{"--config", file4}, []string{
			"sources: defaults, " + file4 + "\n", "upstream_mode: shared\nupstream_conns: 2\n",
		}},
		{"upstream mode from env over the file", []string{"RESPMETER_CONFIG=" + file4, "RESPMETER_UPSTREAM_CONNS=0",
			"RESPMETER_ROUTE=slots", "RESPMETER_SHARDS=127.0.0.1:7000"}, nil, []string{
			"sources: defaults, " + file4 + ", RESPMETER_ROUTE, RESPMETER_SHARDS, RESPMETER_UPSTREAM_CONNS\n",
			"route: slots\n", "upstream_mode: shared\nupstream_conns: 0\n",
		}},
		{"upstream mode from flags over env", []string{"RESPMETER_CONFIG=" + file4, "RESPMETER_UPSTREAM_MODE=private", "RESPMETER_UPSTREAM_CONNS=3"},
			[]string{"--upstream-mode", "shared", "--upstream-conns", "4"}, []string{
				"RESPMETER_UPSTREAM_MODE, RESPMETER_UPSTREAM_CONNS, --upstream-mode, --upstream-conns\n",
				"upstream_mode: shared\nupstream_conns: 4\n",
			}},
		// A pinned route is fine once a flag turns the file's shared mode off.
		{"flag turns shared off for pinned", []string{"RESPMETER_CONFIG=" + file4},
			[]string{"--route", "pinned", "--shards", "127.0.0.1:7000", "--upstream-mode", "private"}, []string{
				"route: pinned\n", "upstream_mode: private\nupstream_conns: 2\n",
			}},
		{"facade from env and flags", []string{"RESPMETER_ROUTE=facade", "RESPMETER_FACADE_LISTEN=127.0.0.1:7100,127.0.0.1:7101"},
			[]string{"--shards", "127.0.0.1:7000,127.0.0.1:7001"}, []string{
				"sources: defaults, RESPMETER_ROUTE, RESPMETER_FACADE_LISTEN, --shards\n",
				"route: facade\nshards:\n    - 127.0.0.1:7000\n    - 127.0.0.1:7001\nshard_zones: []\ncluster: \"\"\nfacade_listen:\n    - 127.0.0.1:7100\n    - 127.0.0.1:7101\n",
			}},
		{"explicit default size flag wins", []string{"RESPMETER_CLIENT_OUTPUT_LIMIT=1MB"}, []string{"--client-output-limit", "64MiB"},
			[]string{"client_output_limit: 64MiB\n", "sources: defaults, RESPMETER_CLIENT_OUTPUT_LIMIT, --client-output-limit\n"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			stdout, stderr, code := runCLI(t, tc.env, append([]string{"proxy", "--check"}, tc.args...)...)
			if code != exitOK {
				t.Fatalf("exit %d\nstderr:\n%s", code, stderr)
			}
			for _, w := range tc.want {
				if !strings.Contains(stdout, w) {
					t.Errorf("stdout does not contain %q:\n%s", w, stdout)
				}
			}
		})
	}
}

func TestBadEnv(t *testing.T) {
	for _, tc := range []struct{ env, want string }{
		{"RESPMETER_LOOPS=many", `respmeter: RESPMETER_LOOPS: key "loops": must be an integer, got "many"`},
		{"RESPMETER_MEASURE=maybe", `respmeter: RESPMETER_MEASURE: key "measure": must be true or false, got "maybe"`},
		{"RESPMETER_DRAIN_TIMEOUT=5", `respmeter: RESPMETER_DRAIN_TIMEOUT: key "drain_timeout": must be a duration`},
		{"RESPMETER_DIAL_TIMEOUT=-1s", `respmeter: RESPMETER_DIAL_TIMEOUT: key "dial_timeout": must be > 0, got -1s`},
		{"RESPMETER_ADMIN=disabled", `respmeter: RESPMETER_ADMIN: key "admin": must be host:port or "off", got "disabled"`},
		{"RESPMETER_LISTEN=off", `respmeter: RESPMETER_LISTEN: key "listen": off needs tls_listen: with both listeners off no client could connect`},
		{"RESPMETER_LOG_FORMAT=xml", `respmeter: RESPMETER_LOG_FORMAT: key "log_format": must be one of text|json, got "xml"`},
		{"RESPMETER_CLIENT_OUTPUT_LIMIT=64M", `respmeter: RESPMETER_CLIENT_OUTPUT_LIMIT: key "client_output_limit": must be a size in bytes such as 1048576, "512KiB", "64MiB" or "1GiB" (KB/MB/GB are powers of 1000), got "64M"`},
		{"RESPMETER_CLIENT_QUERY_LIMIT=-1", `respmeter: RESPMETER_CLIENT_QUERY_LIMIT: key "client_query_limit": must be >= 0 (0 means unlimited), got "-1"`},
		{"RESPMETER_MAX_CLIENTS=-2", `respmeter: RESPMETER_MAX_CLIENTS: key "max_clients": must be >= 0 (0 means unlimited), got -2`},
		{"RESPMETER_PROBE_INTERVAL=100", `respmeter: RESPMETER_PROBE_INTERVAL: key "probe_interval": must be a duration such as "250ms" or "5s", got "100"`},
		{"RESPMETER_ENGINE_POLL=-5s", `respmeter: RESPMETER_ENGINE_POLL: key "engine_poll": must be >= 0 (0 disables), got -5s`},
		{"RESPMETER_SLOWLOG_THRESHOLD=slow", `respmeter: RESPMETER_SLOWLOG_THRESHOLD: key "slowlog_threshold": must be a duration such as "250ms" or "5s", got "slow"`},
		{"RESPMETER_SLOWLOG_LEN=2000000", `respmeter: RESPMETER_SLOWLOG_LEN: key "slowlog_len": must be <= 1048576, got 2000000`},
		{"RESPMETER_HDR_INTERVAL=-1s", `respmeter: RESPMETER_HDR_INTERVAL: key "hdr_interval": must be > 0, got -1s`},
		{"RESPMETER_ROUTE=cluster", `respmeter: RESPMETER_ROUTE: key "route": must be one of none|slots|pinned|facade, got "cluster"`},
		{"RESPMETER_SHARDS=127.0.0.1:7000,", `respmeter: RESPMETER_SHARDS: key "shards": must be a comma-separated list of host:port such as "127.0.0.1:7000,127.0.0.1:7001", got "127.0.0.1:7000," (entry 2 is empty)`},
		{"RESPMETER_SHARDS=127.0.0.1:7000", `respmeter: RESPMETER_SHARDS: key "shards": needs route slots, pinned or facade, got route "none"`},
		{"RESPMETER_FACADE_LISTEN=127.0.0.1:7100", `respmeter: RESPMETER_FACADE_LISTEN: key "facade_listen": needs route facade, got route "none"`},
		{"RESPMETER_FACADE_TLS=true", `respmeter: RESPMETER_FACADE_TLS: key "facade_tls": needs route facade, got route "none"`},
		{"RESPMETER_CLUSTER=127.0.0.1:7000", `respmeter: RESPMETER_CLUSTER: key "cluster": needs route slots, pinned or facade, got route "none"`},
		{"RESPMETER_PIN_BY=first-key", `respmeter: RESPMETER_PIN_BY: key "pin_by": needs route pinned, got route "none"`},
		{"RESPMETER_TOPOLOGY_REFRESH=1ms", `respmeter: RESPMETER_TOPOLOGY_REFRESH: key "topology_refresh": must be at least 1s, got 1ms`},
		{"RESPMETER_UPSTREAM_MODE=mux", `respmeter: RESPMETER_UPSTREAM_MODE: key "upstream_mode": must be one of private|shared, got "mux"`},
		{"RESPMETER_UPSTREAM_CONNS=-1", `respmeter: RESPMETER_UPSTREAM_CONNS: key "upstream_conns": must be >= 0 (0 means 1), got -1`},
		{"RESPMETER_UPSTREAM_CONNS=many", `respmeter: RESPMETER_UPSTREAM_CONNS: key "upstream_conns": must be an integer, got "many"`},
	} {
		t.Run(tc.env, func(t *testing.T) {
			t.Parallel()
			_, stderr, code := runCLI(t, []string{tc.env}, "proxy", "--check")
			if code != exitUsage || !strings.Contains(stderr, tc.want) {
				t.Errorf("exit %d, want %d with %q in stderr:\n%s", code, exitUsage, tc.want, stderr)
			}
		})
	}
}

func TestVersion(t *testing.T) {
	stdout, stderr, code := runCLI(t, nil, "version")
	if code != exitOK || !regexp.MustCompile(`^respmeter \S+ go1\.\S+ \w+/\w+`).MatchString(stdout) {
		t.Errorf("exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
}

// logAddr returns the pattern matching a text log line with msg and its
// addr attribute, capturing the address.
func logAddr(msg string) string {
	return fmt.Sprintf(`msg="%s".* addr=(\S+)`, regexp.QuoteMeta(msg))
}
