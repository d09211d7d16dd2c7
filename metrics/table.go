package metrics

import (
	"bytes"
	"fmt"
	"io"
	"strings"
	"time"
)

// tablePcts returns the percentiles (percent, 0-100) in each phase block of
// the table; a max column follows them.
// tablePhases are the phases the table shows (service and queue are in
// /stats and /metrics); injected follows them when a fault injection rule
// delayed any command, and tls when TLS clients were timed.
var tablePhases = [...]Phase{PhaseTotal, PhaseUpstream, PhaseProxy}

func tablePcts() []float64 { return []float64{50, 99, 99.9} }

// WriteTable writes a memtier_benchmark-style latency table of the Set's
// stats to w; see Snapshot.WriteTable. The Set is merged into a buffer first,
// so a slow w does not hold up other readers.
func (s *Set) WriteTable(w io.Writer) error {
	var buf bytes.Buffer
	_ = s.view(func(sn *Snapshot) error { return sn.WriteTable(&buf) })
	_, err := w.Write(buf.Bytes())
	return err
}

// WriteTable writes a memtier_benchmark-style text table to w: one row per
// command counted, in command ID order, then a Totals row over all commands
// merged. Columns are the command, its Ops (commands counted, timed or not)
// and, for each phase (total, upstream, proxy, injected when a fault
// injection rule delayed any command: its percentiles are over the delayed
// commands, and tls when TLS clients were timed: over their commands), p50, p99, p99.9 and max in milliseconds with 3 decimals; "-"
// marks a command that was never timed (or never delayed). If
// think times were recorded, a line summarizing them follows. If shards are
// registered (Set.Shard), a second, short table follows with one row per
// shard, in index order: Ops, p50 and p99 of the total time in
// milliseconds with 3 decimals (the unit of the first table), and the mean
// commands per upstream write ("-" when never
// timed or never written to). It returns the first error from w.
func (sn *Snapshot) WriteTable(w io.Writer) error {
	const (
		opsWidth = 12
		colWidth = 10
	)
	pcts := tablePcts()
	nameWidth := len("Command")
	for i := range sn.Commands {
		if c := &sn.Commands[i]; c.Count > 0 {
			nameWidth = max(nameWidth, len(c.Name))
		}
	}
	blockWidth := (len(pcts) + 1) * (colWidth + 1) // columns of one phase, each with a leading space
	totals := sn.Totals()
	phases := tablePhases[:]
	if totals.Phases[PhaseInjected].Count() > 0 {
		phases = append(phases[:len(phases):len(phases)], PhaseInjected)
	}
	tlsOn := totals.Phases[PhaseTLS].Count() > 0
	if tlsOn {
		phases = append(phases[:len(phases):len(phases)], PhaseTLS)
	}

	var b strings.Builder
	fmt.Fprintf(&b, "Latency in milliseconds (ms), 3 decimals; Ops = commands counted, timed or not.\n")
	if totals.Phases[PhaseInjected].Count() > 0 {
		fmt.Fprintf(&b, "total = request read .. reply written; upstream = request sent .. reply read; injected = the delays of\n")
		fmt.Fprintf(&b, "fault injection rules (over the commands they delayed); proxy = total - upstream - injected.\n")
	} else {
		fmt.Fprintf(&b, "total = request read .. reply written; upstream = request sent .. reply read; proxy = total - upstream.\n")
	}
	if tlsOn {
		fmt.Fprintf(&b, "tls = decrypting requests and encrypting replies of TLS clients (over their commands), part of proxy.\n")
	}
	fmt.Fprintf(&b, "pN = Nth percentile (HdrHistogram, 3 significant digits).\n")

	head := fmt.Sprintf("%-*s %*s", nameWidth, "", opsWidth, "")
	cols := fmt.Sprintf("%-*s %*s", nameWidth, "Command", opsWidth, "Ops")
	for _, p := range phases {
		head += " |" + center(" "+p.String()+" (ms) ", blockWidth, '-')
		cols += " |"
		for _, pct := range pcts {
			cols += fmt.Sprintf(" %*s", colWidth, fmt.Sprintf("p%g", pct))
		}
		cols += fmt.Sprintf(" %*s", colWidth, "max")
	}
	rule := strings.Repeat("=", len(cols))
	b.WriteString(rule + "\n" + head + "\n" + cols + "\n" + strings.Repeat("-", len(cols)) + "\n")

	row := func(name string, c *CommandStats) {
		fmt.Fprintf(&b, "%-*s %*d", nameWidth, name, opsWidth, c.Count)
		for _, p := range phases {
			d := c.Phases[p]
			b.WriteString(" |")
			for _, v := range append(percentiles(d, pcts), d.Max()) {
				if d.Count() == 0 {
					fmt.Fprintf(&b, " %*s", colWidth, "-")
				} else {
					fmt.Fprintf(&b, " %*.3f", colWidth, millis(v))
				}
			}
		}
		b.WriteString("\n")
	}
	for i := range sn.Commands {
		if c := &sn.Commands[i]; c.Count > 0 {
			row(c.Name, c)
		}
	}
	b.WriteString(strings.Repeat("-", len(cols)) + "\n")
	row("Totals", &totals)
	b.WriteString(rule + "\n")

	if t := sn.Think; t.Count() > 0 {
		fmt.Fprintf(&b, "Think time (ms): count %d", t.Count())
		for i, v := range percentiles(t, pcts) {
			fmt.Fprintf(&b, ", p%g %.3f", pcts[i], millis(v))
		}
		fmt.Fprintf(&b, ", max %.3f\n", millis(t.Max()))
	}
	sn.writeShardTable(&b)
	_, err := io.WriteString(w, b.String())
	return err
}

// writeShardTable writes the per-shard table of WriteTable to b, or nothing
// if no shard is registered.
func (sn *Snapshot) writeShardTable(b *strings.Builder) {
	if len(sn.Shards) == 0 {
		return
	}
	const (
		opsWidth = 12
		colWidth = 15
	)
	nameWidth := len("Shard")
	for i := range sn.Shards {
		nameWidth = max(nameWidth, len(sn.Shards[i].Name))
	}
	cols := fmt.Sprintf("%-*s %*s | %*s %*s | %*s", nameWidth, "Shard", opsWidth, "Ops",
		colWidth, "p50 total (ms)", colWidth, "p99 total (ms)", colWidth, "mean batch")
	rule := strings.Repeat("=", len(cols))
	fmt.Fprintf(b, "\nPer shard: total latency in milliseconds (ms), 3 decimals; batch = commands per upstream write.\n")
	b.WriteString(rule + "\n" + cols + "\n" + strings.Repeat("-", len(cols)) + "\n")
	for i := range sn.Shards {
		ss := &sn.Shards[i]
		p50, p99, batch := "-", "-", "-"
		if d := ss.Phases[PhaseTotal]; d.Count() > 0 {
			p50 = fmt.Sprintf("%.3f", millis(d.Percentile(50)))
			p99 = fmt.Sprintf("%.3f", millis(d.Percentile(99)))
		}
		if ss.Batch.Count() > 0 {
			batch = fmt.Sprintf("%.2f", ss.Batch.Mean())
		}
		fmt.Fprintf(b, "%-*s %*d | %*s %*s | %*s\n", nameWidth, ss.Name, opsWidth, ss.Count,
			colWidth, p50, colWidth, p99, colWidth, batch)
	}
	b.WriteString(rule + "\n")
}

// percentiles returns d's value at each percent in pcts (0-100).
func percentiles(d Durations, pcts []float64) []time.Duration {
	out := make([]time.Duration, len(pcts))
	for i, pct := range pcts {
		out[i] = d.Percentile(pct)
	}
	return out
}

// millis converts d to milliseconds.
func millis(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// center pads s on both sides with fill to width runes (s is ASCII).
func center(s string, width int, fill byte) string {
	if len(s) >= width {
		return s
	}
	left := (width - len(s)) / 2
	return strings.Repeat(string(fill), left) + s + strings.Repeat(string(fill), width-len(s)-left)
}
