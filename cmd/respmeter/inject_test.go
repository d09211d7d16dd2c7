package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/respmeter/respmeter/internal/redistest"
)

// TestProxyInject: respmeter proxy --inject FILE applies the rules (an
// error reply, a delay) to a real engine's traffic, counts them in
// respmeter_inject_total{rule,effect}, and shows the delay as the injected
// phase in /stats and /metrics; a bad rule file stops it at start with the
// file and line.
func TestProxyInject(t *testing.T) {
	srv := redistest.Start(t)
	dir := t.TempDir()
	rules := filepath.Join(dir, "rules.yaml")
	if err := os.WriteFile(rules, []byte(`rules:
- name: slow-get
  commands: [GET]
  delay: 3ms
- name: no-set
  commands: [SET]
  keys: "ro:*"
  error: "READONLY You can't write against a read only replica."
`), 0o600); err != nil {
		t.Fatal(err)
	}
	_, addr, admin := startProxy(t, srv.Addr(), "--inject", rules)
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer c.Close()
	ctx := context.Background()
	if err := c.Set(ctx, "ro:1", "v", 0).Err(); err == nil || !strings.HasPrefix(err.Error(), "READONLY ") {
		t.Errorf("SET ro:1: %v, want the injected READONLY", err)
	}
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	for range 5 {
		if err := c.Get(ctx, "k").Err(); err != nil {
			t.Fatal(err)
		}
	}
	redistest.Eventually(t, 2*time.Second, func() error {
		body := httpGet(t, "http://"+admin+"/metrics")
		for _, want := range []string{
			`respmeter_inject_total{effect="delay",rule="slow-get"} 5`,
			`respmeter_inject_total{effect="error",rule="no-set"} 1`,
			`respmeter_command_duration_seconds_count{command="get",phase="injected"} 5`,
		} {
			if !strings.Contains(body, want) {
				return &missing{want}
			}
		}
		if regexp.MustCompile(`command="set",phase="injected"`).MatchString(body) {
			t.Errorf("/metrics has an injected phase for SET, which no delay touched")
		}
		return nil
	})
	var stats struct {
		Commands map[string]struct {
			Phases map[string]struct {
				Count int64   `json:"count"`
				P50   float64 `json:"p50"`
			} `json:"phases"`
		} `json:"commands"`
	}
	if err := json.Unmarshal([]byte(httpGet(t, "http://"+admin+"/stats")), &stats); err != nil {
		t.Fatal(err)
	}
	if inj := stats.Commands["get"].Phases["injected"]; inj.Count != 5 || inj.P50 < 0.00295 || inj.P50 > 0.00305 {
		t.Errorf("/stats get injected: %+v, want 5 at 3 ms", inj)
	}

	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("rules:\n- name: x\n  delay: 2ms\n  colour: red\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// A configuration error, as every other: exit 2. So is a rule the
	// proxy's routing cannot apply, and a file that is not there.
	retry := filepath.Join(dir, "retry.yaml")
	if err := os.WriteFile(retry, []byte("rules:\n- name: r\n  error: TRYAGAIN x\n  retry: true\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ file, want string }{
		{bad, bad + `:4: rules[0]: unknown key "colour"`},
		{retry, retry + `:2: rules[0]: rule "r": retry needs route slots or facade`},
		{filepath.Join(dir, "none.yaml"), "none.yaml: no such file or directory"},
	} {
		p := start(t, nil, "proxy", "--listen", "127.0.0.1:0", "--upstream", srv.Addr(), "--admin", "off", "--inject", tc.file)
		if code := p.wait(t); code != exitUsage {
			t.Errorf("rule file %s: exit %d, want %d", filepath.Base(tc.file), code, exitUsage)
		}
		if !strings.Contains(p.stderr.String(), tc.want) {
			t.Errorf("stderr lacks %q:\n%s", tc.want, p.stderr)
		}
	}
}

type missing struct{ what string }

func (m *missing) Error() string { return "/metrics lacks " + m.what }
