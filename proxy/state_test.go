package proxy

import (
	"slices"
	"testing"

	"github.com/respmeter/respmeter/routing"
	"github.com/respmeter/respmeter/routing/command"
)

// TestUnreplayedState: the CLIENT state setters a routed session does not
// replay on its other shard connections (the start-up warning) are found
// by rule from the engine's table: on the built-in 7.0 table only
// NO-EVICT; with the subcommands Redis 7.2+ and Valkey 8 add, NO-TOUCH,
// SETINFO and CAPA too. SETNAME and TRACKING are replayed.
func TestUnreplayedState(t *testing.T) {
	if got := unreplayedState(nil); !slices.Equal(got, []string{"client|no-evict"}) {
		t.Errorf("built-in table: %q, want [client|no-evict]", got)
	}
	client := *command.Client.Info()
	client.Subcommands = map[string]*command.Info{}
	for k, v := range command.Client.Info().Subcommands {
		client.Subcommands[k] = v
	}
	ns := command.FlagNoscript | command.FlagLoading | command.FlagStale
	conn := []string{"@slow", "@connection"}
	for name, arity := range map[string]int{"no-touch": 3, "setinfo": 4, "capa": -3} {
		client.Subcommands[name] = &command.Info{Name: "client|" + name, Arity: arity, Flags: ns, ACLCategories: conn}
	}
	// A key spec anywhere makes the engine's entries decide (see routing.Resolver).
	get := *command.Get.Info()
	r := routing.NewResolver(map[string]*command.Info{"client": &client, "get": &get})
	want := []string{"client|capa", "client|no-evict", "client|no-touch", "client|setinfo"}
	if got := unreplayedState(r); !slices.Equal(got, want) {
		t.Errorf("engine table: %q, want %q", got, want)
	}
}
