package proxy

import (
	"bytes"
	"testing"

	"github.com/respmeter/respmeter/internal/redistest"
	"github.com/respmeter/respmeter/routing"
	"github.com/respmeter/respmeter/routing/command"
)

// TestClientStateReplayedOnEveryShard: a CLIENT subcommand that sets
// connection state by rule (command.ConnState) — here NO-TOUCH and
// SETINFO, which Redis 7.2+ and Valkey 8 add — reaches every shard
// connection of a routed client once, is kept for the connections it opens
// later (the latest per key), and RESET forgets it. It reached the home
// shard only.
func TestClientStateReplayedOnEveryShard(t *testing.T) {
	s, cl, _ := routedPair(t, false, nil)
	client := *command.Client.Info()
	client.Subcommands = map[string]*command.Info{}
	for k, v := range command.Client.Info().Subcommands {
		client.Subcommands[k] = v
	}
	ns := command.FlagNoscript | command.FlagLoading | command.FlagStale
	conn := []string{"@slow", "@connection"}
	for name, arity := range map[string]int{"no-touch": 3, "setinfo": 4} {
		client.Subcommands[name] = &command.Info{Name: "client|" + name, Arity: arity, Flags: ns, ACLCategories: conn}
	}
	get := *command.Get.Info() // a key spec anywhere makes the engine's entries decide
	s.p.resolver = routing.NewResolver(map[string]*command.Info{"client": &client, "get": &get})

	noTouch := redistest.Cmd("CLIENT", "NO-TOUCH", "on")
	cl.in = append(append(noTouch, redistest.Cmd("CLIENT", "SETINFO", "LIB-NAME", "a")...), redistest.Cmd("CLIENT", "SETINFO", "LIB-NAME", "b")...)
	s.clientTraffic(cl)
	for i, ln := range s.links {
		if got := bytes.Count(ln.c.(*memConn).out, noTouch); got != 1 {
			t.Errorf("shard %d got CLIENT NO-TOUCH %d times, want 1", i, got)
		}
	}
	var replay []byte
	for _, st := range s.states() {
		replay = append(replay, st...)
	}
	if want := string(noTouch) + string(redistest.Cmd("CLIENT", "SETINFO", "LIB-NAME", "b")); string(replay) != want {
		t.Errorf("replayed on a new connection: %q, want %q", replay, want)
	}
	cl.in = redistest.Cmd("RESET")
	s.clientTraffic(cl)
	for range s.states() {
		t.Fatal("state left after RESET")
	}
}
