package proxy_test

import (
	"bufio"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/respmeter/respmeter/internal/redistest"
	"github.com/respmeter/respmeter/internal/resp"
	"github.com/respmeter/respmeter/proxy"
	"github.com/respmeter/respmeter/proxy/proxytest"
)

// streamedReplies are RESP3 streamed strings and aggregates (RESP3 spec,
// "Streamed strings" and "Streamed aggregates"), by the command that gets
// them from the scripted engine. No engine sends them today; the
// specification allows them, so the proxy must relay them.
var streamedReplies = map[string]string{
	"GET":      "$?\r\n;4\r\nHell\r\n;5\r\no wor\r\n;1\r\nd\r\n;0\r\n",
	"LRANGE":   "*?\r\n:1\r\n$?\r\n;2\r\nab\r\n;0\r\n*?\r\n.\r\n.\r\n",
	"HGETALL":  "%?\r\n+a\r\n:1\r\n+b\r\n~?\r\n#t\r\n.\r\n.\r\n",
	"SMEMBERS": "~?\r\n|1\r\n+ttl\r\n:3\r\n+x\r\n.\r\n",
}

// startStreamingEngine starts a scripted RESP3 engine on a loopback port
// (startScriptedEngine, with no delay).
func startStreamingEngine(t *testing.T) string {
	t.Helper()
	return startScriptedEngine(t, "engine", 0)
}

// scriptedBlobError is the scripted engine's answer to CLIENT SETNAME of a
// name starting "refused": a RESP3 blob error, which no real engine sends
// to SETNAME.
const scriptedBlobError = "!26\r\nERR scripted SETNAME error\r\n"

// startScriptedEngine starts a scripted RESP3 engine on a loopback port, for
// replies no real engine sends: it answers HELLO with a RESP3 map, PING with
// +PONG, ECHO with +label (which engine a request reached), the commands
// of streamedReplies with their streamed reply, CLIENT SETNAME with +OK or,
// for a name starting "refused", scriptedBlobError, LLEN with :7 after
// delay, anything else (COMMAND INFO, the proxy's start-up probe) with an
// error.
func startScriptedEngine(t *testing.T, label string, delay time.Duration) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go serveScripted(c, label, delay)
		}
	}()
	return ln.Addr().String()
}

func serveScripted(c net.Conn, label string, delay time.Duration) {
	defer c.Close()
	r := bufio.NewReader(c)
	var sc resp.RequestScanner
	var buf []byte
	var args [][]byte
	tmp := make([]byte, 4096)
	for {
		n, err := r.Read(tmp)
		if err != nil {
			return
		}
		buf = append(buf, tmp[:n]...)
		var out []byte
		for {
			m, kind, err := sc.Scan(buf)
			if err != nil || m == 0 {
				break
			}
			args = resp.Args(buf[:m], kind, args[:0])
			name := ""
			if len(args) > 0 {
				name = strings.ToUpper(string(args[0]))
			}
			switch {
			case name == "HELLO":
				out = append(out, "%1\r\n$5\r\nproto\r\n:3\r\n"...)
			case name == "PING":
				out = append(out, "+PONG\r\n"...)
			case name == "ECHO":
				out = append(out, "+"+label+"\r\n"...)
			case name == "CLIENT" && len(args) == 3 && strings.EqualFold(string(args[1]), "setname"):
				if strings.HasPrefix(string(args[2]), "refused") {
					out = append(out, scriptedBlobError...)
				} else {
					out = append(out, "+OK\r\n"...)
				}
			case name == "LLEN":
				// The replies before it go now; this one after delay.
				if _, err := c.Write(out); err != nil {
					return
				}
				time.Sleep(delay)
				out = append(out[:0], ":7\r\n"...)
			case streamedReplies[name] != "":
				out = append(out, streamedReplies[name]...)
			default:
				out = append(out, "-ERR unknown command\r\n"...)
			}
			buf = buf[m:]
			sc.Reset()
		}
		if _, err := c.Write(out); err != nil {
			return
		}
	}
}

// TestStreamedRepliesRelayed: RESP3 streamed replies reach the client byte
// for byte, pipelined and one by one, in every upstream shape (they used to
// close the connection as "malformed reply from upstream").
func TestStreamedRepliesRelayed(t *testing.T) {
	engine := startStreamingEngine(t)
	modes := []struct {
		name string
		mod  func(*proxy.Config)
	}{
		{"private", func(c *proxy.Config) { c.UpstreamMode = proxy.UpstreamPrivate }},
		{"shared", func(c *proxy.Config) { c.UpstreamMode = proxy.UpstreamShared }},
		{"slots", func(c *proxy.Config) {
			c.Route, c.Shards, c.UpstreamMode = proxy.RouteSlots, []string{engine}, proxy.UpstreamPrivate
		}},
		{"slots+shared", func(c *proxy.Config) {
			c.Route, c.Shards, c.UpstreamMode = proxy.RouteSlots, []string{engine}, proxy.UpstreamShared
		}},
		{"pinned", func(c *proxy.Config) { c.Route, c.Shards = proxy.RoutePinned, []string{engine} }},
	}
	order := []string{"GET", "LRANGE", "HGETALL", "SMEMBERS"}
	var pipeline [][]byte
	want := ""
	for _, name := range order {
		args := []string{name, "k"}
		if name == "LRANGE" {
			args = append(args, "0", "-1")
		}
		pipeline = append(pipeline, redistest.Cmd(args...))
		want += streamedReplies[name]
	}
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			p, _ := proxytest.StartProxy(t, engine, m.mod)
			c := redistest.Dial(t, p.Addr())
			defer c.Close()
			c.Roundtrip(t, redistest.Cmd("HELLO", "3"), []byte("%1\r\n$5\r\nproto\r\n:3\r\n"))
			for i, req := range pipeline {
				c.Roundtrip(t, req, []byte(streamedReplies[order[i]]))
			}
			c.Send(t, respJoin(append(pipeline, redistest.Cmd("PING"))...))
			c.Expect(t, []byte(want+"+PONG\r\n"), 5*time.Second)
		})
	}
}
