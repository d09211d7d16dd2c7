package command

import (
	"slices"
	"testing"
)

// TestConnStateBuiltin: the rule gives every built-in command and
// subcommand the effect the proxy's fixed lists gave them (Redis 7.0.15).
func TestConnStateBuiltin(t *testing.T) {
	want := map[string]ConnEffect{
		"auth": ConnSets, "hello": ConnSets, "select": ConnSets, "readonly": ConnSets, "readwrite": ConnSets,
		"client|setname": ConnSets, "client|tracking": ConnSets, "client|caching": ConnSets,
		"client|reply": ConnSets, "client|no-evict": ConnSets,
		"client|id": ConnReads, "client|getname": ConnReads, "client|info": ConnReads,
		"client|trackinginfo": ConnReads, "client|getredir": ConnReads,
	}
	var got []string
	for id := ID(0); int(id) < NumIDs(); id++ {
		in := id.Info()
		check := func(in *Info) {
			e := ConnState(in)
			if e != want[in.Name] {
				t.Errorf("ConnState(%s) = %v, want %v", in.Name, e, want[in.Name])
			}
			if e != ConnNone {
				got = append(got, in.Name)
			}
		}
		check(in)
		for _, s := range in.Subcommands {
			check(s)
		}
	}
	if len(got) != len(want) {
		slices.Sort(got)
		t.Errorf("classified %q, want the %d of %v", got, len(want), want)
	}
	if ConnState(nil) != ConnNone {
		t.Error("ConnState(nil) is not ConnNone")
	}
}

// TestConnStateNewer: subcommands newer than the built-in table, as Redis
// 7.2/8.0 and Valkey 8.1 report them in COMMAND INFO, are classified by the
// rule.
func TestConnStateNewer(t *testing.T) {
	conn := []string{"@slow", "@connection"}
	admin := []string{"@admin", "@slow", "@dangerous", "@connection"}
	ns := FlagNoscript | FlagLoading | FlagStale
	for _, tc := range []struct {
		in   Info
		want ConnEffect
	}{
		{Info{Name: "client|no-touch", Arity: 3, Flags: ns, ACLCategories: conn}, ConnSets},
		{Info{Name: "client|setinfo", Arity: 4, Flags: ns, ACLCategories: conn}, ConnSets},
		{Info{Name: "client|capa", Arity: -3, Flags: ns, ACLCategories: conn}, ConnSets},
		{Info{Name: "client|import-source", Arity: 3, Flags: ns, ACLCategories: conn}, ConnSets},
		{Info{Name: "client|mystate", Arity: 2, Flags: ns, ACLCategories: conn}, ConnReads},
		{Info{Name: "client|killall", Arity: -3, Flags: ns | FlagAdmin, ACLCategories: admin}, ConnNone},
		{Info{Name: "client|help", Arity: 2, Flags: FlagLoading | FlagStale, ACLCategories: conn}, ConnNone},
		{Info{Name: "waitaof", Arity: 4, Flags: FlagNoscript | FlagBlocking}, ConnNone},
	} {
		if got := ConnState(&tc.in); got != tc.want {
			t.Errorf("ConnState(%s) = %v, want %v", tc.in.Name, got, tc.want)
		}
	}
}
