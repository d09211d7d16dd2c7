package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/respmeter/respmeter/internal/redistest"
)

// TestProxyShardZones: three standalone Valkey 9.1 engines, each with an
// availability-zone of its own, behind respmeter proxy --route facade
// --shards. Each shard's engine in /stats shard_engines names its zone (as
// INFO server on the engine directly does), the per-shard table at exit
// shows it beside the shard's address, and HELLO on each virtual node is
// answered by that node's own engine, its availability_zone passed
// through. Skips on an engine without the setting (before Valkey 9.1).
func TestProxyShardZones(t *testing.T) {
	ctx := context.Background()
	probe := redistest.Start(t)
	if got, _ := probe.Client().ConfigGet(ctx, "availability-zone").Result(); len(got) == 0 {
		_, engine := probe.Version()
		t.Skipf("%s has no availability-zone (set %s to a Valkey 9.1 server)", engine, redistest.EngineEnv)
	}
	var addrs []string
	zones := map[string]string{}
	for i := range 3 {
		s := redistest.Start(t, "--availability-zone", fmt.Sprintf("zone-%c", 'a'+i))
		addrs = append(addrs, s.Addr())
		info := s.DoT(t, "INFO", "server").(string)
		_, rest, _ := strings.Cut(info, "availability_zone:")
		zones[s.Addr()] = strings.TrimSpace(strings.SplitN(rest, "\n", 2)[0])
		if zones[s.Addr()] != fmt.Sprintf("zone-%c", 'a'+i) {
			t.Fatalf("shard %d's INFO server says zone %q", i, zones[s.Addr()])
		}
	}
	p := start(t, nil, "proxy", "--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0", "--loops", "1",
		"--route", "facade", "--shards", strings.Join(addrs, ","),
		"--facade-listen", "127.0.0.1:0,127.0.0.1:0,127.0.0.1:0", "--engine-poll", "100ms")
	m := p.waitFor(t, p.stderr, `msg="proxy listening" component=proxy addr=\S+ route=facade .*facade=(\S+) `)
	admin := "http://" + p.waitFor(t, p.stderr, logAddr("admin listening"))[1]
	for i, node := range strings.Split(m[1], ",") {
		c := redis.NewClient(&redis.Options{Addr: node, Protocol: 3, DisableIdentity: true})
		hello, err := c.Do(ctx, "HELLO", "3").Result()
		_ = c.Close()
		if got := fmt.Sprint(hello.(map[any]any)["availability_zone"]); err != nil || got != zones[addrs[i]] {
			t.Errorf("HELLO on virtual node %d: availability_zone %q (%v), its engine's %q", i, got, err, zones[addrs[i]])
		}
	}
	redistest.Eventually(t, 10*time.Second, func() error {
		var doc struct {
			Shards []struct {
				Shard  string `json:"shard"`
				Engine *struct {
					Zone string `json:"availability_zone"`
				} `json:"engine"`
			} `json:"shard_engines"`
		}
		if err := json.Unmarshal([]byte(httpGet(t, admin+"/stats")), &doc); err != nil {
			return err
		}
		if len(doc.Shards) != 3 {
			return fmt.Errorf("/stats shard_engines: %+v", doc.Shards)
		}
		for _, s := range doc.Shards {
			if s.Engine == nil || s.Engine.Zone != zones[s.Shard] {
				return fmt.Errorf("/stats shard_engines: %s's engine %+v, its zone %q", s.Shard, s.Engine, zones[s.Shard])
			}
		}
		return nil
	})
	p.signal(t, syscall.SIGTERM)
	p.wait(t)
	for _, a := range addrs {
		if want := a + " (" + zones[a] + ")"; !strings.Contains(p.stdout.String(), want) {
			t.Errorf("the per-shard table lacks %q:\n%s", want, p.stdout)
		}
	}
}

// TestProxyShardZonesConfigured: --shard-zones gives each of --shards a
// zone, which the per-shard table at exit shows beside the shard's address
// (on any engine: the zone is respmeter's setting, not the engine's).
func TestProxyShardZonesConfigured(t *testing.T) {
	a, b := redistest.Start(t), redistest.Start(t)
	p := start(t, nil, "proxy", "--listen", "127.0.0.1:0", "--admin", "off", "--loops", "1",
		"--route", "slots", "--shards", a.Addr()+","+b.Addr(), "--shard-zones", "eu-west-1a,eu-west-1b")
	addr := p.waitFor(t, p.stderr, logAddr("proxy listening"))[1]
	c := redis.NewClient(&redis.Options{Addr: addr, DisableIdentity: true})
	for i := range 20 { // keys on both shards
		if err := c.Set(context.Background(), fmt.Sprint("zone:", i), i, 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	_ = c.Close()
	p.signal(t, syscall.SIGTERM)
	p.wait(t)
	for _, want := range []string{a.Addr() + " (eu-west-1a)", b.Addr() + " (eu-west-1b)"} {
		if !strings.Contains(p.stdout.String(), want) {
			t.Errorf("the per-shard table lacks %q:\n%s", want, p.stdout)
		}
	}
}
