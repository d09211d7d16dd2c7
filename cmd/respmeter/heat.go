package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/respmeter/respmeter/internal/capture"
	"github.com/respmeter/respmeter/internal/resp"
	"github.com/respmeter/respmeter/metrics/heat"
	"github.com/respmeter/respmeter/routing"
)

// reshardOptions are the flags of "heat reshard" and of "heat FILE".
type reshardOptions struct {
	from     string // URL of a proxy's /slots, or a file holding that JSON
	shards   int
	layout   string // a slot map (heat.ParseLayout); "" = the even layout of shards
	by       string // requests, bytes or engine
	asJSON   bool
	keyNames string
	top      int
}

func (o *reshardOptions) addLayoutFlags(cmd *cobra.Command) {
	cmd.Flags().IntVar(&o.shards, "shards", 0, "predict and balance for `N` shards (the layout redis-cli --cluster create gives N masters)")
	cmd.Flags().StringVar(&o.layout, "layout", "", "predict for this slot `map` instead: shards separated by ';', each a comma list of slots and ranges (\"0-8000;8001-16383\")")
	cmd.Flags().StringVar(&o.by, "by", "requests", "balance by requests, bytes or engine (engine time)")
	cmd.Flags().BoolVar(&o.asJSON, "json", false, "write JSON instead of tables")
}

func newHeatCmd(stdout io.Writer) *cobra.Command {
	var o reshardOptions
	cmd := &cobra.Command{
		Use:   "heat FILE...",
		Short: "Key and slot heat of capture files; what a slot layout would give (heat reshard)",
		Long: `Read capture files (respmeter proxy --capture) and show which keys and hash
slots cost the most: the top keys by requests, by bytes (request + reply)
and by engine time (the captured upstream time), and the requests, bytes
and engine time of each shard under a slot layout. With --shards or
--layout it also predicts each shard's load under that layout and proposes
a balanced one (see "heat reshard"). Every request is counted: nothing is
sampled.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := o.check(); err != nil {
				return usageError(cmd, err)
			}
			names, err := heat.ParseNames(o.keyNames)
			if err != nil {
				return usageError(cmd, err)
			}
			w, err := capture.Load(args...)
			if err != nil {
				return failure(err)
			}
			h := heatOfWorkload(w, names)
			keys := h.Keys(o.top, nil)
			slots := h.Slots(nil)
			if !o.asJSON {
				writeTopKeys(stdout, &keys)
			}
			return failure0(o.reshard(stdout, slots, &keys))
		},
	}
	o.addLayoutFlags(cmd)
	cmd.Flags().StringVar(&o.keyNames, "key-names", "plain", "how keys are shown: plain, pattern (digits and UUIDs become #) or hash")
	cmd.Flags().IntVar(&o.top, "top", 10, "keys listed per ranking")

	var ro reshardOptions
	re := &cobra.Command{
		Use:   "reshard --shards N [--from URL|FILE] [--layout MAP]",
		Short: "Predict each shard's load under a slot layout from observed slot heat, and propose a balanced layout",
		Long: `Read the slot heat of a running proxy (its admin /slots, the default
http://127.0.0.1:9121/slots) or of a file holding that JSON, predict each
shard's requests, bytes and engine time under the layout of --shards N
(as redis-cli --cluster create lays N masters out) or of --layout, and
propose the layout of contiguous slot ranges whose largest shard (--by) is
the smallest possible, with the slot ranges to move (redis-cli --cluster
reshard) and its predicted imbalance (max shard over mean; 1 is
balanced). A single hot slot cannot be split: its share is a floor.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := ro.check(); err != nil {
				return usageError(cmd, err)
			}
			if ro.shards == 0 && ro.layout == "" {
				return usageError(cmd, errors.New("--shards or --layout is required"))
			}
			slots, err := readSlots(ro.from)
			if err != nil {
				return failure(err)
			}
			return failure0(ro.reshard(stdout, slots, nil))
		},
	}
	ro.addLayoutFlags(re)
	re.Flags().StringVar(&ro.from, "from", "http://127.0.0.1:9121/slots", "a proxy's /slots `URL`, or a file holding that JSON")
	cmd.AddCommand(re)
	return cmd
}

func (o *reshardOptions) check() error {
	switch o.by {
	case "requests", "bytes", "engine":
	default:
		return fmt.Errorf("--by %q: want requests, bytes or engine", o.by)
	}
	if o.shards < 0 || o.shards > 1000 {
		return fmt.Errorf("--shards %d: want 1..1000", o.shards)
	}
	if o.layout != "" && o.shards != 0 {
		return errors.New("--shards and --layout exclude each other")
	}
	return nil
}

// readSlots reads a Slots document from an http(s) URL or a file.
func readSlots(from string) (heat.Slots, error) {
	var doc heat.Slots
	var body []byte
	if strings.HasPrefix(from, "http://") || strings.HasPrefix(from, "https://") {
		c := &http.Client{Timeout: 10 * time.Second}
		resp, err := c.Get(from)
		if err != nil {
			return doc, err
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return doc, fmt.Errorf("GET %s: %s", from, resp.Status)
		}
		if body, err = io.ReadAll(io.LimitReader(resp.Body, 64<<20)); err != nil {
			return doc, err
		}
	} else {
		var err error
		if body, err = os.ReadFile(from); err != nil {
			return doc, err
		}
	}
	if err := json.Unmarshal(body, &doc); err != nil {
		return doc, fmt.Errorf("%s: not a /slots document: %w", from, err)
	}
	return doc, nil
}

// reshardReport is the JSON of "heat reshard --json".
type reshardReport struct {
	Observed  []heat.ShardSum `json:"observed"`
	Layout    string          `json:"layout"`
	Predicted []heat.ShardSum `json:"predicted"`
	Imbalance heat.Imbalance  `json:"predicted_imbalance"`
	By        string          `json:"by"`
	Proposed  string          `json:"proposed"`
	Balanced  []heat.ShardSum `json:"proposed_predicted"`
	BalancedI heat.Imbalance  `json:"proposed_imbalance"`
	Moves     []heat.Move     `json:"moves"`
	Keys      *heat.Keys      `json:"keys,omitempty"`
}

// reshard writes the prediction for o's layout and the balanced proposal;
// with neither --shards nor --layout, the observed shards only.
func (o *reshardOptions) reshard(w io.Writer, slots heat.Slots, keys *heat.Keys) error {
	rep := reshardReport{Observed: slots.Shards, By: o.by, Keys: keys}
	var layout heat.Layout
	var err error
	switch {
	case o.layout != "":
		layout, err = heat.ParseLayout(o.layout)
	case o.shards > 0:
		layout, err = heat.EvenLayout(o.shards)
	}
	if err != nil {
		return err
	}
	if layout != nil {
		rep.Layout = layout.String()
		rep.Predicted = heat.Predict(slots.Slots, layout)
		rep.Imbalance = heat.ImbalanceOf(rep.Predicted)
		bal := heat.Balance(slots.Slots, len(layout), o.by)
		rep.Proposed = bal.String()
		rep.Balanced = heat.Predict(slots.Slots, bal)
		rep.BalancedI = heat.ImbalanceOf(rep.Balanced)
		rep.Moves = heat.Moves(layout, bal)
	}
	if o.asJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	fmt.Fprintf(w, "observed shards (%d slots with requests):\n", len(slots.Slots))
	writeShardSums(w, slots.Shards, nil)
	if layout == nil {
		return nil
	}
	fmt.Fprintf(w, "\npredicted for layout %s:\n", rep.Layout)
	writeShardSums(w, rep.Predicted, layout)
	fmt.Fprintf(w, "imbalance (max/mean): requests %.3f, bytes %.3f, engine %.3f\n", rep.Imbalance.Requests, rep.Imbalance.Bytes, rep.Imbalance.Engine)
	fmt.Fprintf(w, "\nproposed, balanced by %s: %s\n", o.by, rep.Proposed)
	bal, _ := heat.ParseLayout(rep.Proposed)
	writeShardSums(w, rep.Balanced, bal)
	fmt.Fprintf(w, "imbalance (max/mean): requests %.3f, bytes %.3f, engine %.3f\n", rep.BalancedI.Requests, rep.BalancedI.Bytes, rep.BalancedI.Engine)
	fmt.Fprintf(w, "\nslots to move (redis-cli --cluster reshard --cluster-from FROM --cluster-to TO):\n")
	for _, m := range rep.Moves {
		fmt.Fprintf(w, "  %-12s shard %d -> shard %d (%d slots)\n", m.Slots, m.From, m.To, m.Slots.To-m.Slots.From+1)
	}
	return nil
}

func writeShardSums(w io.Writer, sums []heat.ShardSum, layout heat.Layout) {
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "shard\tslots used\trequests\tbytes\tengine s\tranges\t")
	for i, s := range sums {
		ranges := ""
		if layout != nil && i < len(layout) {
			ranges = heat.Layout{layout[i]}.String()
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%.3f\t%s\t\n", s.Shard, s.Slots, s.Requests, s.Bytes, s.EngineSeconds, ranges)
	}
	_ = tw.Flush()
}

func writeTopKeys(w io.Writer, k *heat.Keys) {
	for _, l := range []struct {
		title string
		keys  []heat.Key
	}{{"requests", k.ByRequests}, {"bytes", k.ByBytes}, {"engine seconds", k.ByEngineTime}} {
		fmt.Fprintf(w, "top keys by %s:\n", l.title)
		tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
		for _, key := range l.keys {
			fmt.Fprintf(tw, "  %.6g\tslot %d\treply p50 %d B\t%s\n", key.Estimate, key.Slot, key.ReplyBytesP50, key.Key)
		}
		_ = tw.Flush()
	}
	fmt.Fprintln(w)
}

// heatOfWorkload counts every request of w with a key into a one-loop
// heat.Set (no sampling): the first key's slot, the request's bytes, the
// captured reply's size and its upstream time as engine time.
func heatOfWorkload(w *capture.Workload, names heat.Names) *heat.Set {
	r := routing.NewResolver(nil)
	labels := r.Labels()
	// Rates are over the capture's duration: the Set starts at its start
	// and is read at its end.
	at := w.Start
	h := heat.NewSet(1, heat.Config{Sample: 1, Capacity: 4096, Names: names, Commands: labels,
		Now: func() time.Time { return time.Unix(0, at) }})
	at = w.Start + w.Duration
	l := h.Loop(0)
	var args [][]byte
	var scan resp.RequestScanner
	var p heat.Pending
	for _, c := range w.Conns {
		for _, b := range c.Batches {
			for _, cmd := range b.Cmds {
				scan.Reset()
				_, kind, _ := scan.Scan(cmd.Req)
				args = resp.Args(cmd.Req, kind, args[:0])
				if len(args) == 0 {
					continue
				}
				id := r.Lookup(args[0])
				pos := -1
				if k, ok := r.FirstKeyOf(id, args); ok && len(k) > 0 {
					for i := 1; i < len(args); i++ {
						if len(args[i]) > 0 && &args[i][0] == &k[0] {
							pos = i
							break
						}
					}
				}
				k := l.Begin(&p, r.Name(id), args, pos, len(cmd.Req))
				if cmd.Reply != nil {
					p.ReplySize(cmd.Reply.Size)
				}
				l.End(&p, k, int(id), -1, time.Duration(cmd.Total), time.Duration(cmd.Upstream))
			}
		}
	}
	return h
}
