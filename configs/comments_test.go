package configs

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// comment returns the comment block above key's line in a YAML file, its
// lines joined by spaces.
func comment(t *testing.T, data, key string) string {
	t.Helper()
	lines := strings.Split(data, "\n")
	i := slices.IndexFunc(lines, func(l string) bool { return strings.HasPrefix(l, key+":") })
	if i < 0 {
		t.Fatalf("no key %q", key)
	}
	var block []string
	for j := i - 1; j >= 0 && strings.HasPrefix(lines[j], "#"); j-- {
		block = append([]string{strings.TrimSpace(strings.TrimPrefix(lines[j], "#"))}, block...)
	}
	return strings.Join(block, " ")
}

// TestPassthroughRouteComments: the routes passthrough.yaml says each of
// shards, cluster and facade_listen works "only with" are the routes
// Validate accepts it with (each key set with every route, with what the
// route needs besides), and the route comment says which need shards or
// cluster as Validate does.
func TestPassthroughRouteComments(t *testing.T) {
	b, err := os.ReadFile("passthrough.yaml")
	if err != nil {
		t.Fatal(err)
	}
	data := string(b)
	only := regexp.MustCompile(`Only with route ([a-z, ]+?)(?: or ([a-z]+))?\.`)
	for _, key := range []string{"shards", "cluster", "facade_listen"} {
		m := only.FindStringSubmatch(comment(t, data, key))
		if m == nil {
			t.Errorf("%s: no \"Only with route ...\" in its comment", key)
			continue
		}
		said := strings.Split(strings.ReplaceAll(m[1], " ", ""), ",")
		if m[2] != "" {
			said = append(said, m[2])
		}
		var works []string
		for _, route := range routes {
			c := Default()
			c.Route = route
			switch key {
			case "shards":
				c.Shards = []string{"127.0.0.1:7000", "127.0.0.1:7001"}
			case "cluster":
				c.Cluster = "127.0.0.1:7000"
			case "facade_listen":
				c.FacadeListen = []string{"127.0.0.1:0", "127.0.0.1:0"}
				if route != RouteNone {
					c.Cluster = "127.0.0.1:7000"
				}
			}
			if route == RouteFacade && key != "facade_listen" {
				c.FacadeListen = []string{"127.0.0.1:0", "127.0.0.1:0"}
			}
			if c.Validate() == nil {
				works = append(works, route)
			}
		}
		slices.Sort(said)
		slices.Sort(works)
		if !slices.Equal(said, works) {
			t.Errorf("%s: the comment says only with route %v; Validate accepts it with %v", key, said, works)
		}
	}
	for _, route := range []string{RouteSlots, RoutePinned, RouteFacade} {
		c := Default()
		c.Route, c.Cluster = route, "127.0.0.1:7000"
		if route == RouteFacade {
			c.FacadeListen = []string{"127.0.0.1:0"}
		}
		if err := c.Validate(); err != nil {
			t.Errorf("route %s with cluster: %v", route, err)
		}
	}
	if r := comment(t, data, "route"); !strings.Contains(r, "slots, pinned and facade need exactly one of shards and cluster") {
		t.Errorf("the route comment does not say that slots, pinned and facade each take shards or cluster:\n%s", r)
	}
}

// TestPrometheusConfigComment: the label prometheus.yml tells readers to
// aggregate the engine's own series by (max by (LABEL, ...)) is the one
// the recording rules in rules.yml aggregate them by.
func TestPrometheusConfigComment(t *testing.T) {
	read := func(p string) string {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	maxBy := regexp.MustCompile(`max by \((\w+)`)
	var told []string
	for _, l := range strings.Split(read("prometheus/prometheus.yml"), "\n") {
		if strings.HasPrefix(l, "#") {
			for _, m := range maxBy.FindAllStringSubmatch(l, -1) {
				told = append(told, m[1])
			}
		}
	}
	var used []string
	for _, l := range strings.Split(read("prometheus/rules.yml"), "\n") {
		if !strings.HasPrefix(strings.TrimSpace(l), "#") && strings.Contains(l, "respmeter_engine_") {
			for _, m := range maxBy.FindAllStringSubmatch(l, -1) {
				used = append(used, m[1])
			}
		}
	}
	if len(told) == 0 || len(used) == 0 {
		t.Fatalf("prometheus.yml says max by %v, rules.yml's engine rules use %v: want both", told, used)
	}
	for _, l := range told {
		for _, u := range used {
			if l != u {
				t.Errorf("prometheus.yml says max by (%s, ...); rules.yml aggregates the engine's series by %s", l, u)
			}
		}
	}
}
