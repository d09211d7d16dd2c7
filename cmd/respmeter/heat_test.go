package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/respmeter/respmeter/metrics/heat"
)

// TestHeatReshardFile runs "heat reshard" on a /slots document with a hot
// range in the first quarter of the slots: the prediction for the even
// 4-shard layout puts the hot range's requests on shard 0, and the proposed
// layout's predicted imbalance is lower, with moves that say so.
func TestHeatReshardFile(t *testing.T) {
	var doc heat.Slots
	for x := range heat.NumSlots {
		r := int64(1)
		if x >= 100 && x < 400 {
			r = 100
		}
		doc.Slots = append(doc.Slots, heat.Slot{Slot: x, Requests: r, Bytes: 10 * r})
	}
	b, _ := json.Marshal(doc)
	path := filepath.Join(t.TempDir(), "slots.json")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	stdout, stderr, code := runCLI(t, nil, "heat", "reshard", "--from", path, "--shards", "4", "--json")
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var rep reshardReport
	if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
		t.Fatalf("%v: %s", err, stdout)
	}
	if want := int64(4096 - 300 + 300*100); len(rep.Predicted) != 4 || rep.Predicted[0].Requests != want {
		t.Errorf("predicted %+v, want shard 0 with %d requests", rep.Predicted, want)
	}
	if rep.BalancedI.Requests >= rep.Imbalance.Requests || len(rep.Moves) == 0 {
		t.Errorf("proposed imbalance %.3f, even %.3f, %d moves", rep.BalancedI.Requests, rep.Imbalance.Requests, len(rep.Moves))
	}
	// The text form names the layout and the moves.
	stdout, _, code = runCLI(t, nil, "heat", "reshard", "--from", path, "--shards", "4")
	if code != exitOK || !strings.Contains(stdout, "0-4095;4096-8191;8192-12287;12288-16383") || !strings.Contains(stdout, "slots to move") {
		t.Errorf("exit %d:\n%s", code, stdout)
	}
	if _, _, code := runCLI(t, nil, "heat", "reshard", "--from", path); code != exitUsage {
		t.Errorf("without --shards: exit %d, want usage", code)
	}
}
