package configs

import (
	"errors"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden from the current output")

// checkGolden compares got with the golden file at path, or rewrites it
// under -update.
func checkGolden(t *testing.T, path, got string) {
	t.Helper()
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./configs -update to create it)", err)
	}
	if got != string(want) {
		t.Errorf("output differs from %s (go test ./configs -update rewrites it)\ngot:\n%s\nwant:\n%s", path, got, want)
	}
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
	if c != Default() {
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
		"RESPMETER_LISTEN":        "127.0.0.1:7000",
		"RESPMETER_LOOPS":         "3",
		"RESPMETER_MEASURE":       "false",
		"RESPMETER_DRAIN_TIMEOUT": "1s",
		"RESPMETER_ADMIN":         "", // empty counts as unset
	}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	c := Default()
	keys, err := c.ApplyEnv(lookup)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"listen", "loops", "measure", "drain_timeout"}; !slices.Equal(keys, want) {
		t.Errorf("keys = %v, want %v", keys, want)
	}
	want := Default()
	want.Listen, want.Loops, want.Measure, want.DrainTimeout = "127.0.0.1:7000", 3, false, Duration(time.Second)
	if c != want {
		t.Errorf("got %+v, want %+v", c, want)
	}

	env = map[string]string{"RESPMETER_LOOPS": "many", "RESPMETER_DIAL_TIMEOUT": "3"}
	c = Default()
	_, err = c.ApplyEnv(lookup)
	got := err.Error()
	wantErr := "RESPMETER_LOOPS: key \"loops\": must be an integer, got \"many\"\n" +
		"RESPMETER_DIAL_TIMEOUT: key \"dial_timeout\": must be a duration such as \"250ms\" or \"5s\", got \"3\""
	if got != wantErr {
		t.Errorf("err =\n%s\nwant\n%s", got, wantErr)
	}
	if c != Default() {
		t.Errorf("bad values changed the config: %+v", c)
	}
}

func TestEnvVar(t *testing.T) {
	if got := EnvVar("drain_timeout"); got != "RESPMETER_DRAIN_TIMEOUT" {
		t.Errorf("EnvVar = %q", got)
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
			err := c.Validate()
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("err = %v, want it to contain %q", err, tc.wantErr)
			}
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
	}{{"", "", 0}, {"lisen", "listen", 1}, {"kitten", "sitting", 3}, {"abc", "", 3}} {
		if got := editDistance(tc.a, tc.b); got != tc.want {
			t.Errorf("editDistance(%q, %q) = %d, want %d", tc.a, tc.b, got, tc.want)
		}
	}
}
