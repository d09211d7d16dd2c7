package configs

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/respmeter/respmeter/internal/goldenfile"

	"gopkg.in/yaml.v3"
)

// checkGolden compares got with the file at path (-update rewrites it).
func checkGolden(t *testing.T, path, got string) {
	t.Helper()
	goldenfile.Check(t, path, []byte(got))
}

func TestGoodConfigs(t *testing.T) {
	files, _ := filepath.Glob("testdata/*.good.yaml")
	if len(files) == 0 {
		t.Fatal("no testdata/*.good.yaml")
	}
	for _, file := range files {
		t.Run(filepath.Base(file), func(t *testing.T) {
			c, err := Load(file)
			if err != nil {
				t.Fatalf("Load: %v", err)
			}
			if err := c.Validate(); err != nil {
				t.Fatalf("Validate after Load: %v", err)
			}
			out, err := yaml.Marshal(c)
			if err != nil {
				t.Fatal(err)
			}
			checkGolden(t, strings.TrimSuffix(file, ".yaml")+".golden", string(out))
		})
	}
}

func TestBadConfigs(t *testing.T) {
	files, _ := filepath.Glob("testdata/*.bad.yaml")
	if len(files) == 0 {
		t.Fatal("no testdata/*.bad.yaml")
	}
	for _, file := range files {
		t.Run(filepath.Base(file), func(t *testing.T) {
			_, err := Load(file)
			if err == nil {
				t.Fatal("Load succeeded, want an error")
			}
			for _, fe := range FieldErrors(err) {
				if fe.Source != file {
					t.Errorf("error %q: Source = %q, want %q", fe, fe.Source, file)
				}
				if !errors.Is(fe, ErrInvalid) && !errors.Is(fe, ErrUnknownKey) {
					t.Errorf("error %q wraps neither ErrInvalid nor ErrUnknownKey", fe)
				}
			}
			checkGolden(t, strings.TrimSuffix(file, ".yaml")+".golden", err.Error()+"\n")
		})
	}
}

// TestPassthrough checks the example shipped in the image: it loads, it
// sets every key, and it documents the defaults.
func TestPassthrough(t *testing.T) {
	const file = "passthrough.yaml"
	c, err := Load(file)
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	if err := c.Validate(); err != nil {
		t.Fatalf("Validate: %v", err)
	}
	if !reflect.DeepEqual(c, Default()) {
		t.Errorf("%s = %+v, want the defaults %+v", file, c, Default())
	}
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	scratch := Default()
	lines, errs := decode(&scratch, file, data)
	if len(errs) != 0 {
		t.Fatalf("decode: %v", errs)
	}
	for _, k := range Keys() {
		if lines[k] == 0 {
			t.Errorf("%s does not set key %q", file, k)
		}
	}
}

// TestFieldsCoverConfig pins the key table to the struct: every yaml tag has
// an entry pointing at that very field, and nothing else does.
func TestFieldsCoverConfig(t *testing.T) {
	var c Config
	typ := reflect.TypeOf(c)
	var tags []string
	for i := range typ.NumField() {
		tag := typ.Field(i).Tag.Get("yaml")
		tags = append(tags, tag)
		f, ok := lookupField(tag)
		if !ok {
			t.Errorf("Config.%s (yaml %q) has no entry in fields", typ.Field(i).Name, tag)
			continue
		}
		want := reflect.ValueOf(&c).Elem().Field(i).Addr().Interface()
		if got := f.ptr(&c); got != want {
			t.Errorf("fields[%q] points at the wrong field", tag)
		}
	}
	if !slices.Equal(tags, Keys()) {
		t.Errorf("Keys() = %v, want struct order %v", Keys(), tags)
	}
}

func TestDefaultValid(t *testing.T) {
	c := Default()
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
}

func TestDurationYAML(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    Duration
		wantErr string
	}{
		{in: "250ms", want: Duration(250 * time.Millisecond)},
		{in: "1m30s", want: Duration(90 * time.Second)},
		{in: `"5s"`, want: Duration(5 * time.Second)},
		{in: "5", wantErr: `must be a duration such as "250ms" or "5s", got "5"`},
		{in: "[1s]", wantErr: `got a list`},
	} {
		t.Run(tc.in, func(t *testing.T) {
			var d Duration
			err := yaml.Unmarshal([]byte(tc.in), &d)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want it to contain %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || d != tc.want {
				t.Fatalf("got %v, %v; want %v", d, err, tc.want)
			}
			out, err := yaml.Marshal(d)
			if err != nil {
				t.Fatal(err)
			}
			var back Duration
			if err := yaml.Unmarshal(out, &back); err != nil || back != d {
				t.Fatalf("round trip through %q: %v, %v", out, back, err)
			}
		})
	}
}

func TestSet(t *testing.T) {
	for _, tc := range []struct {
		key, val string
		check    func(Config) bool
		wantErr  string
	}{
		{key: "loops", val: "4", check: func(c Config) bool { return c.Loops == 4 }},
		{key: "measure", val: "false", check: func(c Config) bool { return !c.Measure }},
		{key: "drain_timeout", val: "250ms", check: func(c Config) bool { return c.DrainTimeout == Duration(250*time.Millisecond) }},
		{key: "admin", val: "off", check: func(c Config) bool { return c.Admin == AdminOff }},
		{key: "loops", val: "x", wantErr: `key "loops": must be an integer, got "x"`},
		{key: "measure", val: "maybe", wantErr: `key "measure": must be true or false, got "maybe"`},
		{key: "dial_timeout", val: "2", wantErr: `key "dial_timeout": must be a duration such as "250ms" or "5s", got "2"`},
		{key: "colour", val: "blue", wantErr: `unknown key "colour"`},
		{key: "client_output_limit", val: "512KiB", check: func(c Config) bool { return c.ClientOutputLimit == 512*KiB }},
		{key: "client_query_limit", val: "2000000", check: func(c Config) bool { return c.ClientQueryLimit == 2_000_000 }},
		{key: "client_query_limit", val: "0", check: func(c Config) bool { return c.ClientQueryLimit == 0 }},
		{key: "max_clients", val: "0", check: func(c Config) bool { return c.MaxClients == 0 }},
		{key: "probe_interval", val: "20ms", check: func(c Config) bool { return c.ProbeInterval == Duration(20*time.Millisecond) }},
		{key: "engine_poll", val: "0s", check: func(c Config) bool { return c.EnginePoll == 0 }},
		{key: "slowlog_threshold", val: "-1s", check: func(c Config) bool { return c.SlowlogThreshold == Duration(-time.Second) }},
		{key: "slowlog_len", val: "7", check: func(c Config) bool { return c.SlowlogLen == 7 }},
		{key: "hdr_log", val: "/tmp/x.hlog", check: func(c Config) bool { return c.HDRLog == "/tmp/x.hlog" }},
		{key: "hdr_interval", val: "200ms", check: func(c Config) bool { return c.HDRInterval == Duration(200*time.Millisecond) }},
		{key: "summary", val: "/tmp/run.json", check: func(c Config) bool { return c.Summary == "/tmp/run.json" }},
		{key: "client_output_limit", val: "64M", wantErr: `key "client_output_limit": must be a size in bytes such as 1048576, "512KiB", "64MiB" or "1GiB" (KB/MB/GB are powers of 1000), got "64M"`},
		{key: "client_query_limit", val: "-1", wantErr: `key "client_query_limit": must be >= 0 (0 means unlimited), got "-1"`},
		{key: "max_clients", val: "lots", wantErr: `key "max_clients": must be an integer, got "lots"`},
		{key: "probe_interval", val: "100", wantErr: `key "probe_interval": must be a duration such as "250ms" or "5s", got "100"`},
		{key: "slowlog_len", val: "1e3", wantErr: `key "slowlog_len": must be an integer, got "1e3"`},
		{key: "route", val: "slots", check: func(c Config) bool { return c.Route == RouteSlots }},
		{key: "shards", val: "127.0.0.1:7000, 127.0.0.1:7001 ,[::1]:7002", check: func(c Config) bool {
			return slices.Equal(c.Shards, []string{"127.0.0.1:7000", "127.0.0.1:7001", "[::1]:7002"})
		}},
		{key: "shards", val: "127.0.0.1:7000", check: func(c Config) bool { return slices.Equal(c.Shards, []string{"127.0.0.1:7000"}) }},
		{key: "shards", val: " ", check: func(c Config) bool { return c.Shards == nil }},
		{key: "cluster", val: "10.0.0.1:7000", check: func(c Config) bool { return c.Cluster == "10.0.0.1:7000" }},
		{key: "topology_refresh", val: "5s", check: func(c Config) bool { return c.TopologyRefresh == Duration(5*time.Second) }},
		{key: "pin_by", val: "first-key", check: func(c Config) bool { return c.PinBy == PinFirstKey }},
		{key: "shards", val: "127.0.0.1:7000,,127.0.0.1:7001",
			wantErr: `key "shards": must be a comma-separated list of host:port such as "127.0.0.1:7000,127.0.0.1:7001", got "127.0.0.1:7000,,127.0.0.1:7001" (entry 2 is empty)`},
		{key: "shards", val: "127.0.0.1:7000,",
			wantErr: `key "shards": must be a comma-separated list of host:port such as "127.0.0.1:7000,127.0.0.1:7001", got "127.0.0.1:7000," (entry 2 is empty)`},
		{key: "topology_refresh", val: "30", wantErr: `key "topology_refresh": must be a duration such as "250ms" or "5s", got "30"`},
		{key: "upstream_mode", val: "shared", check: func(c Config) bool { return c.UpstreamMode == UpstreamShared }},
		{key: "upstream_conns", val: "4", check: func(c Config) bool { return c.UpstreamConns == 4 }},
		{key: "upstream_conns", val: "0", check: func(c Config) bool { return c.UpstreamConns == 0 }},
		{key: "upstream_conns", val: "some", wantErr: `key "upstream_conns": must be an integer, got "some"`},
	} {
		t.Run(tc.key+"="+tc.val, func(t *testing.T) {
			c := Default()
			err := c.Set(tc.key, tc.val)
			if tc.wantErr != "" {
				if err == nil || err.Error() != tc.wantErr {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || !tc.check(c) {
				t.Fatalf("Set: %v, config %+v", err, c)
			}
		})
	}
}

func TestApplyEnv(t *testing.T) {
	env := map[string]string{
		"RESPMETER_LISTEN":              "127.0.0.1:7000",
		"RESPMETER_LOOPS":               "3",
		"RESPMETER_MEASURE":             "false",
		"RESPMETER_DRAIN_TIMEOUT":       "1s",
		"RESPMETER_ADMIN":               "", // empty counts as unset
		"RESPMETER_CLIENT_OUTPUT_LIMIT": "1MiB",
		"RESPMETER_CLIENT_QUERY_LIMIT":  "10MB",
		"RESPMETER_MAX_CLIENTS":         "50",
		"RESPMETER_PROBE_INTERVAL":      "0s",
		"RESPMETER_ENGINE_POLL":         "1s",
		"RESPMETER_SLOWLOG_THRESHOLD":   "1ms",
		"RESPMETER_SLOWLOG_LEN":         "8",
		"RESPMETER_HDR_LOG":             "out.hlog",
		"RESPMETER_HDR_INTERVAL":        "2s",
		"RESPMETER_ROUTE":               "pinned",
		"RESPMETER_SHARDS":              "127.0.0.1:7001,127.0.0.1:7002",
		"RESPMETER_TOPOLOGY_REFRESH":    "10s",
		"RESPMETER_PIN_BY":              "first-key",
		"RESPMETER_CLUSTER":             "",
		"RESPMETER_UPSTREAM_MODE":       "private",
		"RESPMETER_UPSTREAM_CONNS":      "3",
	}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	c := Default()
	keys, err := c.ApplyEnv(lookup)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"listen", "route", "shards", "topology_refresh", "pin_by", "upstream_mode", "upstream_conns", "loops", "measure", "drain_timeout", "client_output_limit", "client_query_limit",
		"max_clients", "probe_interval", "engine_poll", "slowlog_threshold", "slowlog_len", "hdr_log", "hdr_interval"}; !slices.Equal(keys, want) {
		t.Errorf("keys = %v, want %v", keys, want)
	}
	want := Default()
	want.Listen, want.Loops, want.Measure, want.DrainTimeout = "127.0.0.1:7000", 3, false, Duration(time.Second)
	want.ClientOutputLimit, want.ClientQueryLimit, want.MaxClients = MiB, 10_000_000, 50
	want.ProbeInterval, want.EnginePoll, want.SlowlogThreshold = 0, Duration(time.Second), Duration(time.Millisecond)
	want.SlowlogLen, want.HDRLog, want.HDRInterval = 8, "out.hlog", Duration(2*time.Second)
	want.Route, want.Shards, want.TopologyRefresh, want.PinBy = RoutePinned, []string{"127.0.0.1:7001", "127.0.0.1:7002"},
		Duration(10*time.Second), PinFirstKey
	want.UpstreamMode, want.UpstreamConns = UpstreamPrivate, 3
	if err := c.Validate(); err != nil {
		t.Errorf("Validate: %v", err)
	}
	if !reflect.DeepEqual(c, want) {
		t.Errorf("got %+v, want %+v", c, want)
	}

	env = map[string]string{"RESPMETER_LOOPS": "many", "RESPMETER_DIAL_TIMEOUT": "3", "RESPMETER_CLIENT_OUTPUT_LIMIT": "lots",
		"RESPMETER_SHARDS": ",127.0.0.1:7000", "RESPMETER_UPSTREAM_CONNS": "1.5"}
	c = Default()
	_, err = c.ApplyEnv(lookup)
	got := err.Error()
	wantErr := "RESPMETER_SHARDS: key \"shards\": must be a comma-separated list of host:port such as " +
		"\"127.0.0.1:7000,127.0.0.1:7001\", got \",127.0.0.1:7000\" (entry 1 is empty)\n" +
		"RESPMETER_UPSTREAM_CONNS: key \"upstream_conns\": must be an integer, got \"1.5\"\n" +
		"RESPMETER_LOOPS: key \"loops\": must be an integer, got \"many\"\n" +
		"RESPMETER_DIAL_TIMEOUT: key \"dial_timeout\": must be a duration such as \"250ms\" or \"5s\", got \"3\"\n" +
		"RESPMETER_CLIENT_OUTPUT_LIMIT: key \"client_output_limit\": " + sizeWant + ", got \"lots\""
	if got != wantErr {
		t.Errorf("err =\n%s\nwant\n%s", got, wantErr)
	}
	if !reflect.DeepEqual(c, Default()) {
		t.Errorf("bad values changed the config: %+v", c)
	}
}

func TestEnvVar(t *testing.T) {
	if got := EnvVar("drain_timeout"); got != "RESPMETER_DRAIN_TIMEOUT" {
		t.Errorf("EnvVar = %q", got)
	}
}

// checkValidateErr fails t unless err is nil (wantErr "") or contains
// wantErr.
func checkValidateErr(t *testing.T, err error, wantErr string) {
	t.Helper()
	if wantErr == "" {
		if err != nil {
			t.Fatalf("Validate: %v", err)
		}
		return
	}
	if err == nil || !strings.Contains(err.Error(), wantErr) {
		t.Fatalf("err = %v, want it to contain %q", err, wantErr)
	}
}

// TestValidateListenOff: listen "off" serves TLS clients only, so it needs
// tls_listen, and the facade (whose virtual nodes serve plaintext beside
// listen) cannot have it.
func TestValidateListenOff(t *testing.T) {
	for _, tc := range []struct {
		name, yaml, wantErr string
	}{
		{"TLS only", "listen: \"off\"\ntls_listen: 127.0.0.1:6390\ntls_cert_file: c.pem\ntls_key_file: k.pem\ntls_auth_clients: \"no\"\n", ""},
		{"no listener", "listen: \"off\"\n", `key "listen": off needs tls_listen: with both listeners off no client could connect`},
		{"facade", "listen: \"off\"\ntls_listen: 127.0.0.1:6390\ntls_cert_file: c.pem\ntls_key_file: k.pem\ntls_auth_clients: \"no\"\n" +
			"route: facade\nshards: [127.0.0.1:7000]\nfacade_listen: [127.0.0.1:7100]\n", `key "listen": off is not for route facade`},
		{"other word", "listen: none\n", `key "listen": must be host:port or "off", got "none"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "c.yaml")
			if err := os.WriteFile(path, []byte(tc.yaml), 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := Load(path) // Load validates
			checkValidateErr(t, err, tc.wantErr)
		})
	}
}

func TestValidateAddresses(t *testing.T) {
	for _, tc := range []struct {
		listen, upstream, admin string
		wantErr                 string
	}{
		{"127.0.0.1:6380", "127.0.0.1:6379", "127.0.0.1:9121", ""},
		{":6379", "redis:6379", "off", ""},
		{"127.0.0.1:0", "127.0.0.1:6379", "127.0.0.1:0", ""},
		{"127.0.0.1:6379", "127.0.0.2:6379", "off", ""},
		{"[::1]:6380", "[::1]:6379", "[::1]:9121", ""},
		{":6379", "127.0.0.1:6379", "off", `key "upstream": must differ from listen`},
		{"127.0.0.1:6379", "[::]:6379", "off", `key "upstream": must differ from listen`},
		{"0.0.0.0:7000", "db:6379", "localhost:7000", `key "admin": must differ from listen`},
		{"127.0.0.1:6380", "db:6379", "", `key "admin": must be host:port or "off", got an empty string`},
		{"127.0.0.1:6380", "db:-1", "off", `key "upstream": port must be a number in 1..65535, got "db:-1"`},
		{"127.0.0.1:http", "db:6379", "off", `key "listen": port must be a number in 0..65535, got "127.0.0.1:http"`},
	} {
		t.Run(tc.listen+"|"+tc.upstream+"|"+tc.admin, func(t *testing.T) {
			c := Default()
			c.Listen, c.Upstream, c.Admin = tc.listen, tc.upstream, tc.admin
			checkValidateErr(t, c.Validate(), tc.wantErr)
		})
	}
}

func TestIsLoopback(t *testing.T) {
	for host, want := range map[string]bool{
		"localhost": true, "127.0.0.1": true, "127.1.2.3": true, "::1": true,
		"": false, "0.0.0.0": false, "::": false, "10.0.0.1": false, "example.com": false,
	} {
		if got := IsLoopback(host); got != want {
			t.Errorf("IsLoopback(%q) = %v, want %v", host, got, want)
		}
	}
}

func TestEditDistance(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want int
	}{{"", "", 0}, {"lisen", "listen", 1}, {"listne", "listen", 1}, {"kitten", "sitting", 3}, {"abc", "", 3}, {"", "abc", 3}} {
		if got := EditDistance(tc.a, tc.b); got != tc.want {
			t.Errorf("EditDistance(%q, %q) = %d, want %d", tc.a, tc.b, got, tc.want)
		}
	}
}

func TestParseSize(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    Size
		wantErr string
	}{
		{in: "0", want: 0},
		{in: "1048576", want: MiB},
		{in: "512KiB", want: 512 * KiB},
		{in: "64MiB", want: 64 * MiB},
		{in: " 64 mib ", want: 64 * MiB},
		{in: "1GiB", want: GiB},
		{in: "2TiB", want: 2 * TiB},
		{in: "100B", want: 100},
		{in: "1KB", want: 1000},
		{in: "5MB", want: 5_000_000},
		{in: "1gb", want: 1_000_000_000},
		{in: "3TB", want: 3_000_000_000_000},
		{in: "8388607TiB", want: 8388607 * TiB},
		{in: "8388608TiB", wantErr: `must be at most 9223372036854775807 bytes (8EiB), got "8388608TiB"`},
		{in: "99999999999999999999", wantErr: `must be at most`},
		{in: "-1", wantErr: `must be >= 0 (0 means unlimited), got "-1"`},
		{in: "", wantErr: `must be a size in bytes such as 1048576, "512KiB", "64MiB" or "1GiB" (KB/MB/GB are powers of 1000), got ""`},
		{in: "MiB", wantErr: `got "MiB"`},
		{in: "1.5GiB", wantErr: `got "1.5GiB"`},
		{in: "64m", wantErr: `got "64m"`},
		{in: "64 MiB/s", wantErr: `got "64 MiB/s"`},
		{in: "+5", wantErr: `got "+5"`},
	} {
		t.Run(tc.in, func(t *testing.T) {
			got, err := ParseSize(tc.in)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("ParseSize = %d, %v; want error containing %q", got, err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("ParseSize = %d, %v; want %d", got, err, tc.want)
			}
			// String and YAML round trips.
			if back, err := ParseSize(got.String()); err != nil || back != got {
				t.Errorf("ParseSize(%q) = %d, %v; want %d", got.String(), back, err, got)
			}
			out, err := yaml.Marshal(got)
			if err != nil {
				t.Fatal(err)
			}
			var y Size
			if err := yaml.Unmarshal(out, &y); err != nil || y != got {
				t.Errorf("YAML round trip through %q: %d, %v", out, y, err)
			}
		})
	}
}

func TestSizeString(t *testing.T) {
	for s, want := range map[Size]string{
		0: "0", 1: "1", 1000: "1000", KiB: "1KiB", 1536: "1536", 64 * MiB: "64MiB",
		GiB: "1GiB", 3 * TiB: "3TiB", 1024 * TiB: "1024TiB",
	} {
		if got := s.String(); got != want {
			t.Errorf("Size(%d).String() = %q, want %q", int64(s), got, want)
		}
	}
}

func TestValidateBackground(t *testing.T) {
	for _, tc := range []struct {
		name    string
		mod     func(*Config)
		wantErr string
	}{
		{"all off", func(c *Config) {
			c.ClientOutputLimit, c.ClientQueryLimit, c.MaxClients = 0, 0, 0
			c.ProbeInterval, c.EnginePoll, c.SlowlogThreshold = 0, 0, Duration(-time.Nanosecond)
		}, ""},
		{"slowlog everything", func(c *Config) { c.SlowlogThreshold = 0 }, ""},
		{"smallest", func(c *Config) {
			c.ProbeInterval = Duration(MinProbeInterval)
			c.EnginePoll = Duration(MinEnginePoll)
			c.HDRInterval = Duration(MinHDRInterval)
			c.SlowlogLen = 1
		}, ""},
		{"largest slowlog", func(c *Config) { c.SlowlogLen = MaxSlowlogLen }, ""},
		{"negative output", func(c *Config) { c.ClientOutputLimit = -1 }, `key "client_output_limit": must be >= 0 (0 means unlimited), got -1`},
		{"negative query", func(c *Config) { c.ClientQueryLimit = -2 }, `key "client_query_limit": must be >= 0 (0 means unlimited), got -2`},
		{"negative clients", func(c *Config) { c.MaxClients = -1 }, `key "max_clients": must be >= 0 (0 means unlimited), got -1`},
		{"negative probe", func(c *Config) { c.ProbeInterval = -1 }, `key "probe_interval": must be >= 0 (0 disables), got -1ns`},
		{"tiny probe", func(c *Config) { c.ProbeInterval = Duration(time.Microsecond) }, `key "probe_interval": must be 0 (off) or at least 1ms, got 1µs`},
		{"negative poll", func(c *Config) { c.EnginePoll = Duration(-time.Second) }, `key "engine_poll": must be >= 0 (0 disables), got -1s`},
		{"tiny poll", func(c *Config) { c.EnginePoll = Duration(time.Millisecond) }, `key "engine_poll": must be 0 (off) or at least 10ms, got 1ms`},
		{"zero hdr interval", func(c *Config) { c.HDRInterval = 0 }, `key "hdr_interval": must be > 0, got 0s`},
		{"tiny hdr interval", func(c *Config) { c.HDRInterval = Duration(time.Millisecond) }, `key "hdr_interval": must be at least 10ms, got 1ms`},
		{"zero slowlog", func(c *Config) { c.SlowlogLen = 0 }, `key "slowlog_len": must be > 0, got 0`},
		{"huge slowlog", func(c *Config) { c.SlowlogLen = MaxSlowlogLen + 1 }, `key "slowlog_len": must be <= 1048576, got 1048577`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := Default()
			tc.mod(&c)
			err := c.Validate()
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			if err == nil || err.Error() != tc.wantErr {
				t.Fatalf("err = %v, want %q", err, tc.wantErr)
			}
		})
	}
}

// TestValidateRouting covers route, shards, cluster, topology_refresh and
// pin_by and how they combine with each other and with listen and upstream.
func TestValidateRouting(t *testing.T) {
	three := []string{"127.0.0.1:7000", "127.0.0.1:7001", "127.0.0.1:7002"}
	many := make([]string, MaxShards+1)
	for i := range many {
		many[i] = "10.0.0.1:" + strconv.Itoa(10000+i)
	}
	for _, tc := range []struct {
		name    string
		mod     func(*Config)
		wantErr string // exact; "" for valid
	}{
		{"default is none", func(*Config) {}, ""},
		{"slots over shards", func(c *Config) { c.Route, c.Shards = RouteSlots, three }, ""},
		{"slots over a cluster", func(c *Config) { c.Route, c.Cluster = RouteSlots, "10.0.0.1:7000" }, ""},
		{"pinned by first key", func(c *Config) { c.Route, c.Shards, c.PinBy = RoutePinned, three, PinFirstKey }, ""},
		{"pinned by connection", func(c *Config) { c.Route, c.Cluster, c.PinBy = RoutePinned, "db:7000", PinConnection }, ""},
		{"routed: default upstream on the listen address", func(c *Config) {
			c.Listen, c.Route, c.Shards = ":6379", RouteSlots, three
		}, ""},
		{"routed: upstream unused but still host:port", func(c *Config) {
			c.Route, c.Shards, c.Upstream = RouteSlots, three, "db"
		}, `key "upstream": must be host:port, got "db"`},
		{"none: upstream on the listen address", func(c *Config) { c.Listen = ":6379" },
			`key "upstream": must differ from listen (":6379"): the proxy would connect to itself`},
		{"largest shard count", func(c *Config) { c.Route, c.Shards = RouteSlots, many[:MaxShards] }, ""},
		{"too many shards", func(c *Config) { c.Route, c.Shards = RouteSlots, many },
			`key "shards": must list at most 1000 addresses, got 1001`},
		{"bad route", func(c *Config) { c.Route = "cluster" }, `key "route": must be one of none|slots|pinned|facade, got "cluster"`},
		{"empty route", func(c *Config) { c.Route = "" }, `key "route": must be one of none|slots|pinned|facade, got ""`},
		{"slots without shards", func(c *Config) { c.Route = RouteSlots },
			`key "route": route slots needs shards (standalone engines) or cluster (a cluster node)`},
		{"pinned without shards", func(c *Config) { c.Route, c.Shards = RoutePinned, []string{} },
			`key "route": route pinned needs shards (standalone engines) or cluster (a cluster node)`},
		{"both", func(c *Config) { c.Route, c.Shards, c.Cluster = RouteSlots, three, "10.0.0.1:7000" },
			`key "cluster": give shards or cluster, not both (route slots)`},
		{"shards without route", func(c *Config) { c.Shards = three }, `key "shards": needs route slots, pinned or facade, got route "none"`},
		{"cluster without route", func(c *Config) { c.Cluster = "db:7000" }, `key "cluster": needs route slots, pinned or facade, got route "none"`},
		{"pin_by without route", func(c *Config) { c.PinBy = PinConnection }, `key "pin_by": needs route pinned, got route "none"`},
		{"pin_by with slots", func(c *Config) { c.Route, c.Shards, c.PinBy = RouteSlots, three, PinFirstKey },
			`key "pin_by": needs route pinned, got route "slots"`},
		{"bad pin_by", func(c *Config) { c.Route, c.Shards, c.PinBy = RoutePinned, three, "random" },
			`key "pin_by": must be one of connection|first-key, got "random"`},
		{"shard without port", func(c *Config) { c.Route, c.Shards = RouteSlots, []string{"127.0.0.1:7000", "db"} },
			`key "shards": entry 2: must be host:port, got "db"`},
		{"shard without host", func(c *Config) { c.Route, c.Shards = RouteSlots, []string{":7000"} },
			`key "shards": entry 1: must be host:port with a host, got ":7000"`},
		{"shard port 0", func(c *Config) { c.Route, c.Shards = RouteSlots, []string{"db:0"} },
			`key "shards": entry 1: port must be a number in 1..65535, got "db:0"`},
		{"duplicate shard", func(c *Config) { c.Route, c.Shards = RouteSlots, append(three, "127.0.0.1:7001") },
			`key "shards": entry 4 repeats entry 2 ("127.0.0.1:7001")`},
		{"shard is the listener", func(c *Config) { c.Listen, c.Route, c.Shards = "0.0.0.0:7001", RouteSlots, three },
			`key "shards": entry 2: "127.0.0.1:7001" is the listen address: the proxy would connect to itself`},
		{"cluster is the listener", func(c *Config) { c.Route, c.Cluster = RouteSlots, "localhost:6380" },
			`key "cluster": "localhost:6380" is the listen address: the proxy would connect to itself`},
		{"bad cluster", func(c *Config) { c.Route, c.Cluster = RouteSlots, "10.0.0.1" },
			`key "cluster": must be host:port, got "10.0.0.1"`},
		{"facade over shards", func(c *Config) {
			c.Route, c.Shards, c.FacadeListen = RouteFacade, three, []string{"127.0.0.1:7100", "127.0.0.1:7101", ":0", ":0"}
		}, ""},
		{"facade: fewer addresses than shards", func(c *Config) {
			c.Route, c.Shards, c.FacadeListen = RouteFacade, three, []string{"127.0.0.1:7100"}
		}, `key "facade_listen": route facade needs one address per shard, in shard order: 1 for 3 shards`},
		{"facade over a cluster", func(c *Config) {
			c.Route, c.Cluster, c.FacadeListen = RouteFacade, "10.0.0.1:7000", []string{"127.0.0.1:7100"}
		}, ""},
		{"facade without shards", func(c *Config) { c.Route, c.FacadeListen = RouteFacade, []string{":0"} },
			`key "route": route facade needs shards (standalone engines) or cluster (a cluster node)`},
		{"facade without addresses", func(c *Config) { c.Route, c.Cluster = RouteFacade, "10.0.0.1:7000" },
			`key "facade_listen": route facade needs at least one address`},
		{"facade: duplicate address", func(c *Config) {
			c.Route, c.Shards, c.FacadeListen = RouteFacade, three[:2], []string{"127.0.0.1:7100", "127.0.0.1:7100"}
		}, `key "facade_listen": entry 2 repeats entry 1 ("127.0.0.1:7100")`},
		{"facade: the listen address", func(c *Config) {
			c.Route, c.Shards, c.FacadeListen = RouteFacade, three[:1], []string{"localhost:6380"}
		}, `key "facade_listen": entry 1 must differ from listen ("127.0.0.1:6380")`},
		{"facade: bad address", func(c *Config) {
			c.Route, c.Shards, c.FacadeListen = RouteFacade, three[:1], []string{"7100"}
		}, `key "facade_listen": entry 1: must be host:port, got "7100"`},
		{"facade_listen without facade", func(c *Config) {
			c.Route, c.Shards, c.FacadeListen = RouteSlots, three, []string{"127.0.0.1:7100"}
		}, `key "facade_listen": needs route facade, got route "slots"`},
		{"smallest refresh", func(c *Config) { c.TopologyRefresh = Duration(MinTopologyRefresh) }, ""},
		{"tiny refresh", func(c *Config) { c.TopologyRefresh = Duration(time.Millisecond) },
			`key "topology_refresh": must be at least 1s, got 1ms`},
		{"zero refresh", func(c *Config) { c.TopologyRefresh = 0 }, `key "topology_refresh": must be > 0, got 0s`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := Default()
			tc.mod(&c)
			err := c.Validate()
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			if err == nil || err.Error() != tc.wantErr {
				t.Fatalf("err = %v, want %q", err, tc.wantErr)
			}
			for _, fe := range FieldErrors(err) {
				if !errors.Is(fe, ErrInvalid) {
					t.Errorf("%q does not wrap ErrInvalid", fe)
				}
			}
		})
	}
}

// TestValidateUpstreamMode covers upstream_mode and upstream_conns and how
// upstream_mode combines with route.
func TestValidateUpstreamMode(t *testing.T) {
	three := []string{"127.0.0.1:7000", "127.0.0.1:7001", "127.0.0.1:7002"}
	for _, tc := range []struct {
		name    string
		mod     func(*Config)
		wantErr string // exact; "" for valid
	}{
		{"default is private", func(*Config) {}, ""},
		{"shared in front of one engine", func(c *Config) { c.UpstreamMode, c.UpstreamConns = UpstreamShared, 4 }, ""},
		{"shared with slots", func(c *Config) { c.Route, c.Shards, c.UpstreamMode = RouteSlots, three, UpstreamShared }, ""},
		{"shared, 0 conns means 1", func(c *Config) { c.UpstreamMode, c.UpstreamConns = UpstreamShared, 0 }, ""},
		{"private with pinned", func(c *Config) { c.Route, c.Shards, c.UpstreamMode = RoutePinned, three, UpstreamPrivate }, ""},
		{"conns unused with private", func(c *Config) { c.UpstreamConns = 8 }, ""},
		{"shared with pinned", func(c *Config) { c.Route, c.Shards, c.UpstreamMode = RoutePinned, three, UpstreamShared },
			`key "upstream_mode": shared needs route none or slots, got route "pinned"`},
		{"bad mode", func(c *Config) { c.UpstreamMode = "multiplexed" },
			`key "upstream_mode": must be one of private|shared, got "multiplexed"`},
		{"empty mode", func(c *Config) { c.UpstreamMode = "" }, `key "upstream_mode": must be one of private|shared, got ""`},
		{"negative conns", func(c *Config) { c.UpstreamMode, c.UpstreamConns = UpstreamShared, -1 },
			`key "upstream_conns": must be >= 0 (0 means 1), got -1`},
		{"bad route: no mode error", func(c *Config) { c.Route, c.UpstreamMode = "cluster", UpstreamShared },
			`key "route": must be one of none|slots|pinned|facade, got "cluster"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := Default()
			tc.mod(&c)
			err := c.Validate()
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			if err == nil || err.Error() != tc.wantErr {
				t.Fatalf("err = %v, want %q", err, tc.wantErr)
			}
			for _, fe := range FieldErrors(err) {
				if !errors.Is(fe, ErrInvalid) {
					t.Errorf("%q does not wrap ErrInvalid", fe)
				}
			}
		})
	}
}

// TestParseRoutingLines: routing errors point at the line of the key that
// is wrong, and a check that read an undecodable key stays quiet.
func TestParseRoutingLines(t *testing.T) {
	for _, tc := range []struct {
		name, yaml, want string
	}{
		{"needs shards: on the route line", "listen: 127.0.0.1:6380\nroute: slots\n",
			`x.yaml:2: key "route": route slots needs shards (standalone engines) or cluster (a cluster node)`},
		{"shards not a list: one error", "route: slots\nshards: 127.0.0.1:7000\n",
			`x.yaml:2: key "shards": must be a list of host:port strings such as [127.0.0.1:7000, 127.0.0.1:7001], got "127.0.0.1:7000"`},
		{"shards entry null", "route: slots\nshards:\n  - 127.0.0.1:7000\n  -\n",
			`x.yaml:4: key "shards": must be a list of host:port strings such as [127.0.0.1:7000, 127.0.0.1:7001], got no value as entry 2`},
		{"route undecodable: pin_by quiet", "route: [slots]\npin_by: first-key\n",
			`x.yaml:1: key "route": must be a string, got a list`},
		{"listen undecodable: shard check quiet", "listen: {}\nroute: slots\nshards: [127.0.0.1:6380]\n",
			`x.yaml:1: key "listen": must be a string, got a mapping`},
		{"alias list", "a: &a [127.0.0.1:7000, 127.0.0.1:7001]\n", `x.yaml:1: unknown key "a"`},
		{"shared with pinned: on the upstream_mode line", "route: pinned\nshards: [127.0.0.1:7000]\nupstream_mode: shared\n",
			`x.yaml:3: key "upstream_mode": shared needs route none or slots, got route "pinned"`},
		{"route undecodable: upstream_mode quiet", "route: {pinned: 1}\nupstream_mode: shared\n",
			`x.yaml:1: key "route": must be a string, got a mapping`},
		{"upstream_mode typo", "upstream_mod: shared\n", `x.yaml:1: unknown key "upstream_mod" (did you mean "upstream_mode"?)`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("x.yaml", []byte(tc.yaml))
			if err == nil || err.Error() != tc.want {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
		})
	}
	// An anchored list used as shards.
	c, err := Parse("x.yaml", []byte("route: slots\nshards: &s [127.0.0.1:7000, 127.0.0.1:7001]\n"))
	if err != nil || !slices.Equal(c.Shards, []string{"127.0.0.1:7000", "127.0.0.1:7001"}) {
		t.Fatalf("anchored list: %v, %v", c.Shards, err)
	}
}

// TestClusterExample checks configs/cluster.yaml: it loads, routes by slot
// over the three shards it documents, and its commented-out alternatives
// (a cluster seed instead of shards; pinned by first key) load too.
func TestClusterExample(t *testing.T) {
	const file = "cluster.yaml"
	c, err := Load(file)
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	want := Default()
	want.Route = RouteSlots
	want.Shards = []string{"127.0.0.1:7000", "127.0.0.1:7001", "127.0.0.1:7002"}
	if !reflect.DeepEqual(c, want) {
		t.Errorf("%s = %+v, want %+v", file, c, want)
	}
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	text := string(data)
	// Swap shards for the commented cluster seed, and slots for pinned.
	i := strings.Index(text, "\nshards:\n")
	j := i + strings.Index(text[i+1:], "127.0.0.1:7002\n") + 1
	if i < 0 || j < i+1 {
		t.Fatalf("%s: no shards list found", file)
	}
	alt := text[:i+1] + text[j+len("127.0.0.1:7002\n"):]
	for _, line := range []string{"# cluster: 127.0.0.1:7000\n", "# topology_refresh: 30s\n", "# pin_by: first-key\n"} {
		if !strings.Contains(alt, line) {
			t.Fatalf("%s lacks the commented line %q", file, line)
		}
		alt = strings.Replace(alt, line, strings.TrimPrefix(line, "# "), 1)
	}
	alt = strings.Replace(alt, "\nroute: slots\n", "\nroute: pinned\n", 1)
	c, err = Parse(file+" (alternatives)", []byte(alt))
	if err != nil {
		t.Fatalf("the commented alternatives do not load: %v\n%s", err, alt)
	}
	if c.Route != RoutePinned || c.Cluster != "127.0.0.1:7000" || c.Shards != nil || c.PinBy != PinFirstKey ||
		c.TopologyRefresh != Duration(30*time.Second) {
		t.Errorf("alternatives: %+v", c)
	}
}
