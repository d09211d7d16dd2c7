package cmdgen

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/respmeter/respmeter/internal/respconn"
)

// Capture dials a redis-server at addr (host:port), switches to RESP3 with
// HELLO 3 and returns its COMMAND INFO (all commands, with subcommands and key
// specs) and version. It sets a deadline of timeout on the whole exchange.
// Entries are decoded by DecodeCommand in strict mode.
func Capture(addr string, timeout time.Duration) (*File, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	c, err := respconn.Dial(ctx, addr, respconn.Options{Timeout: timeout})
	if err != nil {
		return nil, fmt.Errorf("cmdgen: dial %s: %w", addr, err)
	}
	defer c.Close() // Dial closes it when ctx ends: the whole exchange's deadline
	// do runs one command; an error reply is an error.
	do := func(args ...string) (respconn.Value, error) {
		v, err := c.Do(0, args...)
		if err == nil {
			err = v.Err()
		}
		if err != nil {
			return respconn.Value{}, fmt.Errorf("cmdgen: %s: %w", args[0], err)
		}
		return v, nil
	}

	if _, err := do("HELLO", "3"); err != nil {
		return nil, err
	}
	v, err := do("INFO", "server")
	if err != nil {
		return nil, err
	}
	if !v.IsString() {
		return nil, fmt.Errorf("cmdgen: INFO server: got %v, want string", v)
	}
	version := infoField(v.Str, "redis_version")
	if version == "" {
		return nil, fmt.Errorf("cmdgen: INFO server has no redis_version")
	}
	if v, err = do("COMMAND", "INFO"); err != nil {
		return nil, err
	}
	if !v.IsArray() {
		return nil, fmt.Errorf("cmdgen: COMMAND INFO: got %v, want array", v)
	}
	f := &File{Server: "redis-server " + version, Version: version}
	for _, e := range v.Elems {
		if e.Null { // COMMAND INFO answers nil for unknown names; none asked
			continue
		}
		cmd, err := DecodeCommand(e.Any(), false)
		if err != nil {
			return nil, err
		}
		f.Commands = append(f.Commands, cmd)
	}
	sortCommands(f.Commands)
	return f, nil
}

func infoField(info, key string) string {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), key+":"); ok {
			return v
		}
	}
	return ""
}

func sortCommands(cmds []*Command) {
	sort.Slice(cmds, func(i, j int) bool { return cmds[i].Name < cmds[j].Name })
	for _, c := range cmds {
		sortCommands(c.Subcommands)
	}
}

// DecodeCommand converts one element of a COMMAND INFO (or COMMAND) reply
// into a Command. It is the one decoder of command entries: Capture uses it
// for the generator's JSON, and package command's FetchInfo for the table of
// a running engine. It takes the reply as respconn.Value.Any gives it in either
// protocol: a key spec and its begin_search and find_keys are RESP3 maps
// (map[string]any) or, over RESP2, flat arrays of alternating keys and
// values. Names are lower-cased ("client|reply" for a subcommand); empty
// lists are empty, not nil, slices.
//
// With lax false the entry must have the shape of Redis 7.0: exactly 10
// elements (name, arity, flags, first key, last key, step, ACL categories,
// tips, key specs, subcommands) and only the key spec fields 7.0 sends, as
// the capture wants. With lax true (an engine of another version or kind)
// it also accepts 6 to 9 elements (Redis 5 and 6, Dragonfly: the missing
// trailing fields are empty) and more than 10 (the extra ones ignored), and
// ignores key spec fields it does not know. Both modes decode an entry of
// Redis 7.0 to the same Command; both fail on a field of the wrong type.
func DecodeCommand(v any, lax bool) (*Command, error) {
	a, ok := v.([]any)
	if !ok || (!lax && len(a) != 10) || len(a) < 6 {
		want := "10"
		if lax {
			want = "at least 6"
		}
		return nil, fmt.Errorf("cmdgen: command entry: got %T of len %d, want %s-element array", v, len(a), want)
	}
	field := func(i int) any { // a missing trailing field reads as nil: empty
		if i < len(a) {
			return a[i]
		}
		return nil
	}
	name, ok := a[0].(string)
	if !ok {
		return nil, fmt.Errorf("cmdgen: command name: got %T", a[0])
	}
	name = strings.ToLower(name)
	wrap := func(what string, err error) error { return fmt.Errorf("cmdgen: %s %s: %w", name, what, err) }
	c := &Command{Name: name, KeySpecs: []*KeySpec{}, Subcommands: []*Command{}}
	var err error
	if c.Arity, err = toInt(a[1]); err != nil {
		return nil, wrap("arity", err)
	}
	if c.Flags, err = toStrings(a[2]); err != nil {
		return nil, wrap("flags", err)
	}
	if c.FirstKey, err = toInt(a[3]); err != nil {
		return nil, wrap("first key", err)
	}
	if c.LastKey, err = toInt(a[4]); err != nil {
		return nil, wrap("last key", err)
	}
	if c.Step, err = toInt(a[5]); err != nil {
		return nil, wrap("step", err)
	}
	if c.ACLCategories, err = toStrings(field(6)); err != nil {
		return nil, wrap("acl categories", err)
	}
	if c.Tips, err = toStrings(field(7)); err != nil {
		return nil, wrap("tips", err)
	}
	specs, ok := field(8).([]any)
	if !ok && field(8) != nil {
		return nil, wrap("key specs", fmt.Errorf("got %T, want array", field(8)))
	}
	for _, s := range specs {
		ks, err := toKeySpec(s, lax)
		if err != nil {
			return nil, wrap("key spec", err)
		}
		c.KeySpecs = append(c.KeySpecs, ks)
	}
	subs, ok := field(9).([]any)
	if !ok && field(9) != nil {
		return nil, wrap("subcommands", fmt.Errorf("got %T, want array", field(9)))
	}
	for _, s := range subs {
		sc, err := DecodeCommand(s, lax)
		if err != nil {
			return nil, err
		}
		c.Subcommands = append(c.Subcommands, sc)
	}
	return c, nil
}

// asMap returns v as a map: a RESP3 map as is, or a RESP2 flat array of
// alternating string keys and values (how the server sends a map to a RESP2
// client); a later duplicate key wins.
func asMap(v any) (map[string]any, error) {
	switch v := v.(type) {
	case map[string]any:
		return v, nil
	case []any:
		if len(v)%2 != 0 {
			return nil, fmt.Errorf("got array of odd length %d, want map or key/value array", len(v))
		}
		m := make(map[string]any, len(v)/2)
		for i := 0; i < len(v); i += 2 {
			k, ok := v[i].(string)
			if !ok {
				return nil, fmt.Errorf("map key: got %T, want string", v[i])
			}
			m[k] = v[i+1]
		}
		return m, nil
	}
	return nil, fmt.Errorf("got %T, want map", v)
}

// toKeySpec converts one key spec; lax ignores fields it does not know (see
// DecodeCommand).
func toKeySpec(v any, lax bool) (*KeySpec, error) {
	m, err := asMap(v)
	if err != nil {
		return nil, err
	}
	ks := &KeySpec{}
	for k, val := range m {
		switch k {
		case "notes":
			s, ok := val.(string)
			if !ok {
				err = fmt.Errorf("notes: got %T", val)
			}
			ks.Notes = s
		case "flags":
			ks.Flags, err = toStrings(val)
		case "begin_search":
			var spec map[string]any
			ks.BeginSearch.Type, spec, err = typedSpec(val, lax)
			for sk, sv := range spec {
				if err != nil {
					break
				}
				switch sk {
				case "index":
					ks.BeginSearch.Spec.Index, err = toIntPtr(sv)
				case "startfrom":
					ks.BeginSearch.Spec.StartFrom, err = toIntPtr(sv)
				case "keyword":
					s, ok := sv.(string)
					if !ok {
						err = fmt.Errorf("keyword: got %T", sv)
					}
					ks.BeginSearch.Spec.Keyword = &s
				default:
					if !lax {
						err = fmt.Errorf("begin_search: unknown field %q", sk)
					}
				}
			}
		case "find_keys":
			var spec map[string]any
			ks.FindKeys.Type, spec, err = typedSpec(val, lax)
			for sk, sv := range spec {
				if err != nil {
					break
				}
				switch sk {
				case "lastkey":
					ks.FindKeys.Spec.LastKey, err = toIntPtr(sv)
				case "keystep":
					ks.FindKeys.Spec.KeyStep, err = toIntPtr(sv)
				case "limit":
					ks.FindKeys.Spec.Limit, err = toIntPtr(sv)
				case "keynumidx":
					ks.FindKeys.Spec.KeyNumIdx, err = toIntPtr(sv)
				case "firstkey":
					ks.FindKeys.Spec.FirstKey, err = toIntPtr(sv)
				default:
					if !lax {
						err = fmt.Errorf("find_keys: unknown field %q", sk)
					}
				}
			}
		default:
			if !lax {
				err = fmt.Errorf("unknown field %q", k)
			}
		}
		if err != nil {
			return nil, err
		}
	}
	if ks.Flags == nil {
		ks.Flags = []string{}
	}
	return ks, nil
}

// typedSpec splits a {type, spec} map; lax allows other fields besides.
func typedSpec(v any, lax bool) (string, map[string]any, error) {
	m, err := asMap(v)
	if err != nil {
		return "", nil, err
	}
	typ, ok := m["type"].(string)
	if !ok {
		return "", nil, fmt.Errorf("type: got %T", m["type"])
	}
	spec, err := asMap(m["spec"])
	if err != nil {
		return "", nil, fmt.Errorf("spec: %w", err)
	}
	if len(m) != 2 && !lax {
		return "", nil, fmt.Errorf("got %d fields, want type and spec", len(m))
	}
	return typ, spec, nil
}

func toInt(v any) (int, error) {
	n, ok := v.(int64)
	if !ok {
		return 0, fmt.Errorf("got %T, want integer", v)
	}
	return int(n), nil
}

func toIntPtr(v any) (*int, error) {
	n, err := toInt(v)
	return &n, err
}

func toStrings(v any) ([]string, error) {
	a, ok := v.([]any)
	if !ok && v != nil {
		return nil, fmt.Errorf("got %T, want array or set", v)
	}
	out := make([]string, 0, len(a))
	for _, e := range a {
		s, ok := e.(string)
		if !ok {
			return nil, fmt.Errorf("element: got %T, want string", e)
		}
		out = append(out, s)
	}
	return out, nil
}
