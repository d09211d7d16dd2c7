package configs

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/respmeter/respmeter/internal/tlsconf"
)

// EnvPrefix starts every environment variable that overrides a key:
// RESPMETER_ plus the upper-cased key, e.g. RESPMETER_DRAIN_TIMEOUT.
const EnvPrefix = "RESPMETER_"

// field ties one YAML key to its Config field. ptr returns a *string, *int,
// *bool, *Duration, *Size or *[]string into c.
type field struct {
	key string
	ptr func(c *Config) any
}

// fields lists every Config key in file order. It is read-only.
var fields = []field{
	{"listen", func(c *Config) any { return &c.Listen }},
	{"upstream", func(c *Config) any { return &c.Upstream }},
	{"route", func(c *Config) any { return &c.Route }},
	{"shards", func(c *Config) any { return &c.Shards }},
	{"shard_zones", func(c *Config) any { return &c.ShardZones }},
	{"cluster", func(c *Config) any { return &c.Cluster }},
	{"facade_listen", func(c *Config) any { return &c.FacadeListen }},
	{"topology_refresh", func(c *Config) any { return &c.TopologyRefresh }},
	{"pin_by", func(c *Config) any { return &c.PinBy }},
	{"upstream_mode", func(c *Config) any { return &c.UpstreamMode }},
	{"upstream_conns", func(c *Config) any { return &c.UpstreamConns }},
	{"admin", func(c *Config) any { return &c.Admin }},
	{"admin_token_file", func(c *Config) any { return &c.AdminTokenFile }},
	{"capture_dir", func(c *Config) any { return &c.CaptureDir }},
	{"loops", func(c *Config) any { return &c.Loops }},
	{"measure", func(c *Config) any { return &c.Measure }},
	{"drain_timeout", func(c *Config) any { return &c.DrainTimeout }},
	{"dial_timeout", func(c *Config) any { return &c.DialTimeout }},
	{"upstream_timeout", func(c *Config) any { return &c.UpstreamTimeout }},
	{"upstream_user", func(c *Config) any { return &c.UpstreamUser }},
	{"upstream_password", func(c *Config) any { return &c.UpstreamPassword }},
	{"log_level", func(c *Config) any { return &c.LogLevel }},
	{"log_format", func(c *Config) any { return &c.LogFormat }},
	{"client_output_limit", func(c *Config) any { return &c.ClientOutputLimit }},
	{"client_query_limit", func(c *Config) any { return &c.ClientQueryLimit }},
	{"max_clients", func(c *Config) any { return &c.MaxClients }},
	{"probe_interval", func(c *Config) any { return &c.ProbeInterval }},
	{"engine_poll", func(c *Config) any { return &c.EnginePoll }},
	{"slowlog_threshold", func(c *Config) any { return &c.SlowlogThreshold }},
	{"slowlog_len", func(c *Config) any { return &c.SlowlogLen }},
	{"hdr_log", func(c *Config) any { return &c.HDRLog }},
	{"hdr_interval", func(c *Config) any { return &c.HDRInterval }},
	{"metrics_phases", func(c *Config) any { return &c.MetricsPhases }},
	{"metrics_commands", func(c *Config) any { return &c.MetricsCommands }},
	{"heat", func(c *Config) any { return &c.Heat }},
	{"heat_sample", func(c *Config) any { return &c.HeatSample }},
	{"heat_metrics_keys", func(c *Config) any { return &c.HeatMetricsKeys }},
	{"key_names", func(c *Config) any { return &c.KeyNames }},
	{"summary", func(c *Config) any { return &c.Summary }},
	{"inject", func(c *Config) any { return &c.Inject }},
	{"tls_listen", func(c *Config) any { return &c.TLSListen }},
	{"tls_cert_file", func(c *Config) any { return &c.TLSCertFile }},
	{"tls_key_file", func(c *Config) any { return &c.TLSKeyFile }},
	{"tls_ca_cert_file", func(c *Config) any { return &c.TLSCACertFile }},
	{"tls_auth_clients", func(c *Config) any { return &c.TLSAuthClients }},
	{"tls_handshake_timeout", func(c *Config) any { return &c.TLSHandshakeTimeout }},
	{"tls_protocols", func(c *Config) any { return &c.TLSProtocols }},
	{"tls_ciphers", func(c *Config) any { return &c.TLSCiphers }},
	{"facade_tls", func(c *Config) any { return &c.FacadeTLS }},
	{"upstream_tls", func(c *Config) any { return &c.UpstreamTLS }},
	{"upstream_tls_ca_cert_file", func(c *Config) any { return &c.UpstreamTLSCACertFile }},
	{"upstream_tls_cert_file", func(c *Config) any { return &c.UpstreamTLSCertFile }},
	{"upstream_tls_key_file", func(c *Config) any { return &c.UpstreamTLSKeyFile }},
	{"upstream_tls_server_name", func(c *Config) any { return &c.UpstreamTLSServerName }},
	{"upstream_tls_insecure_skip_verify", func(c *Config) any { return &c.UpstreamTLSInsecureSkipVerify }},
	{"upstream_tls_protocols", func(c *Config) any { return &c.UpstreamTLSProtocols }},
	{"upstream_tls_ciphers", func(c *Config) any { return &c.UpstreamTLSCiphers }},
}

// lookupField returns the field for key, or false.
func lookupField(key string) (field, bool) {
	for _, f := range fields {
		if f.key == key {
			return f, true
		}
	}
	return field{}, false
}

// Keys returns every configuration key in file order ("listen", ...).
func Keys() []string {
	out := make([]string, len(fields))
	for i, f := range fields {
		out[i] = f.key
	}
	return out
}

// EnvVar returns the environment variable overriding key:
// EnvVar("drain_timeout") == "RESPMETER_DRAIN_TIMEOUT".
func EnvVar(key string) string { return EnvPrefix + strings.ToUpper(key) }

// Load returns Default overlaid with the YAML file at path, validated. The
// decode is strict: unknown keys, duplicate keys, wrongly typed values and
// more than one YAML document are errors. Every problem found is reported
// at once (errors.Join of *FieldError), each naming the file, the line and
// the key: `x.yaml:3: key "loops": must be >= 0, got -1`.
func Load(path string) (Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Config{}, fmt.Errorf("configs: %w", err)
	}
	return Parse(path, data)
}

// Parse is Load for a file already read; name is used in error messages.
func Parse(name string, data []byte) (Config, error) {
	c := Default()
	lines, errs := decode(&c, name, data)
	bad := map[string]bool{}
	for _, e := range errs {
		bad[e.Key] = true
	}
	for _, e := range FieldErrors(c.Validate()) {
		if bad[e.Key] || slices.ContainsFunc(e.about, func(k string) bool { return bad[k] }) {
			continue // already reported as undecodable; c holds the default
		}
		e.Source, e.Line = name, lines[e.Key]
		if l, ok := lines[entryKey(e.Key, e.entry)]; ok && e.entry > 0 {
			e.Line = l // the list entry at fault rather than its key
		}
		errs = append(errs, e)
	}
	if len(errs) == 0 {
		return c, nil
	}
	slices.SortStableFunc(errs, func(a, b *FieldError) int { return a.Line - b.Line })
	joined := make([]error, len(errs))
	for i, e := range errs {
		joined[i] = e
	}
	return Config{}, errors.Join(joined...)
}

// entryKey names the entry n (1-based) of the list key in decode's line
// map: "shards[2]".
func entryKey(key string, n int) string { return key + "[" + strconv.Itoa(n) + "]" }

// yamlLineRE pulls the line out of yaml.v3 syntax errors ("yaml: line 3: ...").
var yamlLineRE = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

// decode overlays the YAML document in data onto c and returns the line of
// each key it set, and of each entry of a list (entryKey). Keys that fail
// keep their value in c.
//
// The document goes through a yaml.Decoder with KnownFields(true), but into
// a yaml.Node: walking the mapping ourselves is what lets every unknown or
// mistyped key be reported with its own line and a readable reason.
func decode(c *Config, name string, data []byte) (map[string]int, []*FieldError) {
	lines := map[string]int{}
	fail := func(line int, key string, unknown bool, format string, args ...any) *FieldError {
		e := &FieldError{Source: name, Line: line, Key: key, Reason: fmt.Sprintf(format, args...), Err: ErrInvalid}
		if unknown {
			e.Err = ErrUnknownKey
		}
		return e
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return lines, nil // empty file: all defaults
		}
		if m := yamlLineRE.FindStringSubmatch(err.Error()); m != nil {
			n, _ := strconv.Atoi(m[1])
			return lines, []*FieldError{fail(n, "", false, "YAML syntax error: %s", m[2])}
		}
		return lines, []*FieldError{fail(0, "", false, "%s", strings.TrimPrefix(err.Error(), "yaml: "))}
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return lines, []*FieldError{fail(extra.Line, "", false, "more than one YAML document; want exactly one")}
	}
	root := &doc
	if root.Kind == yaml.DocumentNode && len(root.Content) == 1 {
		root = root.Content[0]
	}
	if root.Kind == yaml.ScalarNode && root.Tag == "!!null" {
		return lines, nil // only comments or "~"
	}
	if root.Kind != yaml.MappingNode {
		return lines, []*FieldError{fail(root.Line, "", false, "the top level must be a mapping of keys, got %s", describeNode(root))}
	}
	var errs []*FieldError
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, v := root.Content[i], root.Content[i+1]
		if k.Kind != yaml.ScalarNode {
			errs = append(errs, fail(k.Line, "", false, "keys must be plain names, got %s", describeNode(k)))
			continue
		}
		key := k.Value
		if first, dup := lines[key]; dup {
			errs = append(errs, fail(k.Line, key, false, "duplicate key (first set on line %d)", first))
			continue
		}
		f, ok := lookupField(key)
		if !ok {
			e := fail(k.Line, key, true, "")
			if strings.HasSuffix(key, "tls_ciphersuites") {
				e.Reason = tlsconf.ErrCipherSuites13.Error() // Redis's key, which Go cannot do
			} else if s := suggest(key); s != "" {
				e.Reason = fmt.Sprintf("did you mean %q?", s)
			}
			errs = append(errs, e)
			continue
		}
		lines[key] = k.Line
		if v.Kind == yaml.AliasNode && v.Alias != nil {
			v = v.Alias
		}
		if reason, at := setNode(f.ptr(c), v); reason != "" {
			errs = append(errs, fail(at.Line, key, false, "%s", reason))
		} else if v.Kind == yaml.SequenceNode {
			for i, item := range v.Content {
				lines[entryKey(key, i+1)] = item.Line
			}
		}
	}
	return lines, errs
}

// listWant describes the accepted forms of a list key, for error messages.
const listWant = "must be a list of host:port strings such as [127.0.0.1:7000, 127.0.0.1:7001]"

// setNode decodes v into ptr (from field.ptr): a scalar, or a sequence of
// scalars for a *[]string. It returns "" or the reason it could not, with
// the node at fault (v, or the bad entry of a list).
func setNode(ptr any, v *yaml.Node) (string, *yaml.Node) {
	if p, ok := ptr.(*[]string); ok {
		if v.Kind != yaml.SequenceNode {
			return listWant + ", got " + describeNode(v), v
		}
		var list []string // nil for [], as in Default
		for i, item := range v.Content {
			if item.Kind == yaml.AliasNode && item.Alias != nil {
				item = item.Alias
			}
			if item.Kind != yaml.ScalarNode || item.Tag == "!!null" || item.Value == "" {
				return fmt.Sprintf("%s, got %s as entry %d", listWant, describeNode(item), i+1), item
			}
			list = append(list, item.Value)
		}
		*p = list
		return "", v
	}
	if v.Kind != yaml.ScalarNode || v.Tag == "!!null" {
		switch ptr.(type) {
		case *string:
			return "must be a string, got " + describeNode(v), v
		case *int:
			return "must be an integer, got " + describeNode(v), v
		case *bool:
			return "must be true or false, got " + describeNode(v), v
		}
	}
	switch p := ptr.(type) {
	case *string:
		*p = v.Value
	case *int:
		if v.Tag != "!!int" || v.Decode(p) != nil {
			return "must be an integer, got " + describeNode(v), v
		}
	case *bool:
		if v.Decode(p) != nil {
			return "must be true or false, got " + describeNode(v), v
		}
	case *Duration:
		if err := p.UnmarshalYAML(v); err != nil {
			return err.Error(), v
		}
	case *Size:
		if err := p.UnmarshalYAML(v); err != nil {
			return err.Error(), v
		}
	default:
		panic(fmt.Sprintf("configs: field of unhandled type %T", ptr))
	}
	return "", v
}

// setString parses s into ptr (from field.ptr) and returns "" or the reason
// it could not.
func setString(ptr any, s string) string {
	switch p := ptr.(type) {
	case *string:
		*p = s
	case *int:
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil {
			return fmt.Sprintf("must be an integer, got %q", s)
		}
		*p = n
	case *bool:
		b, err := strconv.ParseBool(strings.TrimSpace(s))
		if err != nil {
			return fmt.Sprintf("must be true or false, got %q", s)
		}
		*p = b
	case *Duration:
		d, err := parseDuration(s)
		if err != nil {
			return err.Error()
		}
		*p = d
	case *Size:
		n, err := ParseSize(s)
		if err != nil {
			return err.Error()
		}
		*p = n
	case *[]string:
		list, err := parseList(s)
		if err != "" {
			return err
		}
		*p = list
	default:
		panic(fmt.Sprintf("configs: field of unhandled type %T", ptr))
	}
	return ""
}

// parseList splits the comma-separated list s ("a:1, b:2") into its
// trimmed entries; "" (or only spaces) is the empty list, nil as in
// Default. An empty entry
// ("a:1,,b:2", a trailing comma) is an error: it returns the reason.
func parseList(s string) ([]string, string) {
	if strings.TrimSpace(s) == "" {
		return nil, ""
	}
	parts := strings.Split(s, ",")
	for i, part := range parts {
		parts[i] = strings.TrimSpace(part)
		if parts[i] == "" {
			return nil, fmt.Sprintf("must be a comma-separated list of host:port such as \"127.0.0.1:7000,127.0.0.1:7001\", got %q (entry %d is empty)", s, i+1)
		}
	}
	return parts, ""
}

// describeNode names what a YAML node holds, for error messages.
func describeNode(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.AliasNode:
		return "an alias"
	case yaml.ScalarNode:
		if n.Tag == "!!null" {
			return "no value"
		}
		return strconv.Quote(n.Value)
	}
	return "nothing"
}

// Set parses value (flag or environment syntax: "250ms", "true", "4",
// "64MiB", "a:1,b:2" for a list) into the field for key. It returns a *FieldError without Source on an unknown
// key or a bad value; Validate still has to run on the result.
func (c *Config) Set(key, value string) error {
	f, ok := lookupField(key)
	if !ok {
		return &FieldError{Key: key, Err: ErrUnknownKey}
	}
	if reason := setString(f.ptr(c), value); reason != "" {
		return invalid(key, "%s", reason)
	}
	return nil
}

// ApplyEnv overrides c with every RESPMETER_* variable that lookup (usually
// os.LookupEnv) reports set and non-empty; an empty variable counts as
// unset. It returns the keys it overrode and the errors.Join of one
// *FieldError per bad value, whose Source is the variable's name.
func (c *Config) ApplyEnv(lookup func(string) (string, bool)) (keys []string, err error) {
	var errs []error
	for _, f := range fields {
		name := EnvVar(f.key)
		v, ok := lookup(name)
		if !ok || v == "" {
			continue
		}
		if reason := setString(f.ptr(c), v); reason != "" {
			errs = append(errs, &FieldError{Source: name, Key: f.key, Reason: reason, Err: ErrInvalid})
			continue
		}
		keys = append(keys, f.key)
	}
	return keys, errors.Join(errs...)
}

// suggest returns the known key closest to an unknown one if it is at most
// two edits away, else "".
func suggest(key string) string {
	best, bestD := "", 3
	for _, f := range fields {
		if d := EditDistance(strings.ToLower(key), f.key); d < bestD {
			best, bestD = f.key, d
		}
	}
	return best
}

// EditDistance is the Levenshtein distance between a and b, in bytes,
// with a swap of two neighbours counted as one edit (optimal string
// alignment: "listne" is one edit from "listen"). It ranks the "did you
// mean" suggestions for unknown configuration keys and flags.
func EditDistance(a, b string) int {
	prev2 := make([]int, len(b)+1)
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(b)]
}
