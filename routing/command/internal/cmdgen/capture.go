package cmdgen

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Capture dials a redis-server at addr (host:port), switches to RESP3 with
// HELLO 3 and returns its COMMAND INFO (all commands, with subcommands and key
// specs) and version. It sets a deadline of timeout on the whole exchange.
func Capture(addr string, timeout time.Duration) (*File, error) {
	conn, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return nil, fmt.Errorf("cmdgen: dial %s: %w", addr, err)
	}
	defer conn.Close()
	if err := conn.SetDeadline(time.Now().Add(timeout)); err != nil {
		return nil, fmt.Errorf("cmdgen: set deadline: %w", err)
	}
	c := &client{w: conn, r: bufio.NewReader(conn)}

	if _, err := c.do("HELLO", "3"); err != nil {
		return nil, err
	}
	v, err := c.do("INFO", "server")
	if err != nil {
		return nil, err
	}
	info, ok := v.(string)
	if !ok {
		return nil, fmt.Errorf("cmdgen: INFO server: got %T, want string", v)
	}
	version := infoField(info, "redis_version")
	if version == "" {
		return nil, fmt.Errorf("cmdgen: INFO server has no redis_version")
	}
	v, err = c.do("COMMAND", "INFO")
	if err != nil {
		return nil, err
	}
	all, ok := v.([]any)
	if !ok {
		return nil, fmt.Errorf("cmdgen: COMMAND INFO: got %T, want array", v)
	}
	f := &File{Server: "redis-server " + version, Version: version}
	for _, e := range all {
		if e == nil { // COMMAND INFO answers nil for unknown names; none asked
			continue
		}
		cmd, err := toCommand(e)
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

// toCommand converts one COMMAND INFO element (a 10-element array in Redis 7.0).
func toCommand(v any) (*Command, error) {
	a, ok := v.([]any)
	if !ok || len(a) != 10 {
		return nil, fmt.Errorf("cmdgen: command entry: got %T of len %d, want 10-element array", v, len(a))
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
	if c.ACLCategories, err = toStrings(a[6]); err != nil {
		return nil, wrap("acl categories", err)
	}
	if c.Tips, err = toStrings(a[7]); err != nil {
		return nil, wrap("tips", err)
	}
	specs, ok := a[8].([]any)
	if !ok && a[8] != nil {
		return nil, wrap("key specs", fmt.Errorf("got %T, want array", a[8]))
	}
	for _, s := range specs {
		ks, err := toKeySpec(s)
		if err != nil {
			return nil, wrap("key spec", err)
		}
		c.KeySpecs = append(c.KeySpecs, ks)
	}
	subs, ok := a[9].([]any)
	if !ok && a[9] != nil {
		return nil, wrap("subcommands", fmt.Errorf("got %T, want array", a[9]))
	}
	for _, s := range subs {
		sc, err := toCommand(s)
		if err != nil {
			return nil, err
		}
		c.Subcommands = append(c.Subcommands, sc)
	}
	return c, nil
}

func toKeySpec(v any) (*KeySpec, error) {
	m, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("got %T, want map", v)
	}
	ks := &KeySpec{}
	for k, val := range m {
		var err error
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
			ks.BeginSearch.Type, spec, err = typedSpec(val)
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
					err = fmt.Errorf("begin_search: unknown field %q", sk)
				}
			}
		case "find_keys":
			var spec map[string]any
			ks.FindKeys.Type, spec, err = typedSpec(val)
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
					err = fmt.Errorf("find_keys: unknown field %q", sk)
				}
			}
		default:
			err = fmt.Errorf("unknown field %q", k)
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

// typedSpec splits a {type, spec} map.
func typedSpec(v any) (string, map[string]any, error) {
	m, ok := v.(map[string]any)
	if !ok {
		return "", nil, fmt.Errorf("got %T, want map", v)
	}
	typ, ok := m["type"].(string)
	if !ok {
		return "", nil, fmt.Errorf("type: got %T", m["type"])
	}
	spec, ok := m["spec"].(map[string]any)
	if !ok {
		return "", nil, fmt.Errorf("spec: got %T", m["spec"])
	}
	if len(m) != 2 {
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

// client is a minimal RESP3 client, enough for the capture: one request at
// a time, replies decoded into nil, string, int64, float64, bool, []any (arrays,
// sets, pushes) and map[string]any.
type client struct {
	w io.Writer
	r *bufio.Reader
}

// maxLen bounds every length the server announces, so a confused peer cannot
// make the capture allocate without bound.
const maxLen = 64 << 20

// ServerError is an error reply from the server.
type ServerError string

func (e ServerError) Error() string { return "cmdgen: server error: " + string(e) }

func (c *client) do(args ...string) (any, error) {
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := io.WriteString(c.w, b.String()); err != nil {
		return nil, fmt.Errorf("cmdgen: write %s: %w", args[0], err)
	}
	v, err := c.read()
	if err != nil {
		return nil, fmt.Errorf("cmdgen: read reply to %s: %w", args[0], err)
	}
	if e, ok := v.(ServerError); ok {
		return nil, fmt.Errorf("%s: %w", args[0], e)
	}
	return v, nil
}

func (c *client) line() (string, error) {
	s, err := c.r.ReadString('\n')
	if err != nil {
		return "", err
	}
	if !strings.HasSuffix(s, "\r\n") {
		return "", errors.New("line not terminated by CRLF")
	}
	return s[:len(s)-2], nil
}

func (c *client) read() (any, error) {
	l, err := c.line()
	if err != nil {
		return nil, err
	}
	if l == "" {
		return nil, errors.New("empty line")
	}
	typ, rest := l[0], l[1:]
	switch typ {
	case '+':
		return rest, nil
	case '-':
		return ServerError(rest), nil
	case ':':
		return strconv.ParseInt(rest, 10, 64)
	case ',':
		return strconv.ParseFloat(rest, 64)
	case '(':
		return rest, nil
	case '#':
		return rest == "t", nil
	case '_':
		return nil, nil
	case '$', '=', '!':
		n, err := parseLen(rest)
		if err != nil || n < 0 {
			return nil, err
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(c.r, buf); err != nil {
			return nil, err
		}
		s := string(buf[:n])
		if typ == '=' && len(s) >= 4 { // verbatim: "txt:" prefix
			s = s[4:]
		}
		if typ == '!' {
			return ServerError(s), nil
		}
		return s, nil
	case '*', '~', '>':
		n, err := parseLen(rest)
		if err != nil || n < 0 {
			return nil, err
		}
		a := make([]any, 0, min(n, 1024))
		for range n {
			v, err := c.read()
			if err != nil {
				return nil, err
			}
			a = append(a, v)
		}
		return a, nil
	case '%', '|':
		n, err := parseLen(rest)
		if err != nil || n < 0 {
			return nil, err
		}
		m := make(map[string]any, min(n, 1024))
		for range n {
			k, err := c.read()
			if err != nil {
				return nil, err
			}
			ks, ok := k.(string)
			if !ok {
				return nil, fmt.Errorf("map key: got %T, want string", k)
			}
			if m[ks], err = c.read(); err != nil {
				return nil, err
			}
		}
		if typ == '|' { // attribute: metadata for the next reply, dropped
			return c.read()
		}
		return m, nil
	}
	return nil, fmt.Errorf("unknown RESP type byte %q", typ)
}

func parseLen(s string) (int, error) {
	n, err := strconv.Atoi(s)
	if err != nil {
		return 0, fmt.Errorf("bad length %q: %w", s, err)
	}
	if n > maxLen {
		return 0, fmt.Errorf("length %d over limit %d", n, maxLen)
	}
	return n, nil
}
