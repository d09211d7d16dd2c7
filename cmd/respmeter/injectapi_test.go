package main

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/respmeter/respmeter/internal/redistest"
	"github.com/respmeter/respmeter/proxy"
)

// TestInjectAPI: fault injection rules changed at run time on a proxy
// started without any, in front of a real redis-server with go-redis as
// the client, through "respmeter inject" and the admin /inject. Without
// the admin token an add or remove is refused (401) and changes nothing;
// with it, added rules apply at once and are counted in the list and in
// respmeter_inject_total, with each rule's window and whether it is
// active now; a bad rule file (its line and rule named, YAML or JSON), a
// name in force already or a rule the proxy's shape cannot apply (a
// -TRYAGAIN retried, over one engine) changes nothing; removing a rule ends its effect, and
// removing one not in force is a 404.
func TestInjectAPI(t *testing.T) {
	srv := redistest.Start(t)
	dir := t.TempDir()
	const token = "inject-t0ken"
	tokenFile := filepath.Join(dir, "token")
	write := func(name, body string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	write("token", token+"\n")
	rules := write("rules.yaml", `rules:
- name: no-set
  commands: [SET]
  keys: "ro:*"
  error: "READONLY You can't write against a read only replica."
- name: slow-reply
  commands: [GET]
  reply_delay: 2ms
- name: later
  at: 1h
  for: 10m
  error: "ERR later"
`)
	_, addr, admin := startProxy(t, srv.Addr(), "--admin-token-file", tokenFile)
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer c.Close()
	ctx := context.Background()
	inject := func(args ...string) (string, string, int) {
		return runCLI(t, nil, append([]string{"inject", "--admin", admin}, args...)...)
	}
	withToken := func(args ...string) (string, string, int) {
		return inject(append([]string{"--admin-token-file", tokenFile}, args...)...)
	}
	listed := func() string {
		out, errOut, code := inject("list")
		if code != 0 {
			t.Fatalf("inject list: exit %d: %s", code, errOut)
		}
		return out
	}
	if out := listed(); strings.TrimSpace(out) != "rule  effect  touched  active  window" {
		t.Errorf("inject list with no rules:\n%s", out)
	}
	if _, errOut, code := inject("add", rules); code != 1 || !strings.Contains(errOut, "401 Unauthorized") {
		t.Errorf("inject add without the token: exit %d, %s; want 1 and 401", code, errOut)
	}
	if err := c.Set(ctx, "ro:1", "v", 0).Err(); err != nil {
		t.Errorf("SET ro:1 after a refused add: %v", err)
	}
	if out, errOut, code := withToken("add", rules); code != 0 || !strings.Contains(out, "no-set") {
		t.Fatalf("inject add: exit %d\n%s%s", code, out, errOut)
	}
	if err := c.Set(ctx, "ro:2", "v", 0).Err(); err == nil || !strings.HasPrefix(err.Error(), "READONLY ") {
		t.Errorf("SET ro:2: %v, want the injected READONLY", err)
	}
	for range 3 {
		if err := c.Get(ctx, "ro:1").Err(); err != nil {
			t.Fatal(err)
		}
	}
	want := "rule        effect       touched  active  window\n" +
		"no-set      error        1        yes     -\n" +
		"slow-reply  reply_delay  3        yes     -\n" +
		"later       error        0        no      at 1h0m0s for 10m0s\n"
	if out := listed(); out != want {
		t.Errorf("inject list:\n%s\nwant:\n%s", out, want)
	}
	// The JSON list gives the window on the wall clock: 1 h from the add.
	var l struct {
		Rules []proxy.InjectCount `json:"rules"`
	}
	if err := json.Unmarshal([]byte(httpGet(t, "http://"+admin+"/inject")), &l); err != nil {
		t.Fatal(err)
	}
	if len(l.Rules) != 3 || l.Rules[0].Window != nil || !l.Rules[0].Active {
		t.Fatalf("GET /inject: %+v", l.Rules)
	}
	if w := l.Rules[2].Window; l.Rules[2].Active || w == nil || w.At != 3600 || w.For != 600 || w.End == nil ||
		time.Until(w.Start) < 59*time.Minute || time.Until(w.Start) > time.Hour || w.End.Sub(w.Start) != 10*time.Minute {
		t.Errorf("GET /inject: rule later: active %v, window %+v; want inactive, 1 h from now for 10 min", l.Rules[2].Active, w)
	}
	redistest.Eventually(t, 2*time.Second, func() error {
		body := httpGet(t, "http://"+admin+"/metrics")
		for _, w := range []string{
			`respmeter_inject_total{effect="error",rule="no-set"} 1`,
			`respmeter_inject_total{effect="reply_delay",rule="slow-reply"} 3`,
			`respmeter_inject_active{rule="slow-reply"} 1`,
			`respmeter_inject_active{rule="later"} 0`,
			`respmeter_command_duration_seconds_count{command="get",phase="injected"} 3`,
		} {
			if !strings.Contains(body, w) {
				return &missing{w}
			}
		}
		return nil
	})

	// Refused whole: a bad file, and a file whose second rule's name is in
	// force (its first rule is not added either).
	bad := write("bad.yaml", "rules:\n- name: x\n  delay: 2ms\n  colour: red\n")
	if _, errOut, code := withToken("add", bad); code != 1 || !strings.Contains(errOut, `400 Bad Request: body:4: rules[0]: unknown key "colour"`) {
		t.Errorf("inject add of a bad file: exit %d, %s", code, errOut)
	}
	// A JSON body on one line: its error names the rule by its JSON path.
	badJSON := write("bad.json", `{"rules": [{"name": "ok", "error": "ERR x"}, {"name": "soon", "at": "1s", "for": "-1s", "delay": "1ms"}]}`)
	if _, errOut, code := withToken("add", badJSON); code != 1 || !strings.Contains(errOut, `400 Bad Request: body:1: rules[1]: for: want a duration of 0 or more, got "-1s"`) {
		t.Errorf("inject add of a bad JSON body: exit %d, %s", code, errOut)
	}
	dup := write("dup.yaml", "rules:\n- name: fresh\n  error: ERR x\n- name: no-set\n  error: ERR y\n")
	if _, errOut, code := withToken("add", dup); code != 1 || !strings.Contains(errOut, `409 Conflict: rules[1]: rule "no-set": name in force already`) {
		t.Errorf("inject add of a name in force: exit %d, %s", code, errOut)
	}
	// retry: on one engine, where the client retries -TRYAGAIN itself.
	retry := write("retry.json", `{"rules": [{"name": "rehashing", "commands": ["SET"], "error": "TRYAGAIN x", "retry": true}]}`)
	if _, errOut, code := withToken("add", retry); code != 1 || !strings.Contains(errOut, `409 Conflict: body:1: rules[0]: rule "rehashing": retry needs route slots or facade`) {
		t.Errorf("inject add of a retry rule over one engine: exit %d, %s", code, errOut)
	}
	if out := listed(); out != want {
		t.Errorf("inject list after refused adds:\n%s\nwant:\n%s", out, want)
	}

	if code, body := adminDo(t, http.MethodDelete, admin, "/inject/no-set", nil, ""); code != http.StatusUnauthorized {
		t.Errorf("DELETE without the token: %d %s", code, body)
	}
	if out, errOut, code := withToken("remove", "no-set"); code != 0 || strings.Contains(out, "no-set") {
		t.Errorf("inject remove no-set: exit %d\n%s%s", code, out, errOut)
	}
	if err := c.Set(ctx, "ro:3", "v", 0).Err(); err != nil {
		t.Errorf("SET ro:3 after the rule's removal: %v", err)
	}
	if _, errOut, code := withToken("remove", "no-set"); code != 1 || !strings.Contains(errOut, "404 Not Found") {
		t.Errorf("inject remove of a rule not in force: exit %d, %s", code, errOut)
	}
	if out, errOut, code := withToken("remove"); code != 0 || strings.TrimSpace(out) != "rule  effect  touched  active  window" {
		t.Errorf("inject remove (all): exit %d\n%s%s", code, out, errOut)
	}
	for k, want := range map[string]int64{"ro:1": 1, "ro:2": 0, "ro:3": 1} {
		if n := srv.DoT(t, "EXISTS", k); n != want {
			t.Errorf("EXISTS %s in the engine: %v, want %d (only ro:2 was refused)", k, n, want)
		}
	}
}
