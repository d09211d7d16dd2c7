// Package engine asks the engine (Redis, Valkey, Dragonfly) itself how long
// commands take, on side connections of its own, so that respmeter can split
// the upstream phase (t_reply - t_sent: engine plus path) into engine time and
// path time.
//
// Two independent workers, each with one TCP connection speaking RESP2:
//
//   - Probe sends PING every interval (default 100 ms) on a connection named
//     respmeter-probe and records the round trip: the path plus an engine
//     doing almost no work.
//   - Poller polls the engine's own statistics every few seconds (default 5 s)
//     on a connection named respmeter-poll: LATENCY HISTOGRAM (Redis and
//     Valkey >= 7; https://redis.io/docs/latest/commands/latency-histogram/),
//     INFO commandstats (https://redis.io/docs/latest/commands/info/) and,
//     where LATENCY HISTOGRAM says nothing (Dragonfly), INFO latencystats.
//     The engine's counters are cumulative; the Poller keeps the deltas
//     between polls. The same poll reads the witnesses of the engine's
//     command thread (Witness: INFO cpu and stats, and /proc/PID when the
//     engine runs on this host).
//
// Both connections are named with CLIENT SETNAME so that CLIENT LIST and
// MONITOR show them. Their own commands (PING, CLIENT, LATENCY, INFO) are
// counted by the engine like any other, at a low rate: one PING per probe
// interval and three or four commands per poll.
//
// Units: the engine reports microseconds; the HdrHistogram inside Probe
// records whole microseconds (1 µs .. 1 h, 3 significant digits, the geometry
// of package metrics); everything exported to Prometheus is in seconds, and
// the Stats methods return time.Duration.
//
// Concurrency: Run is called once, on a goroutine of its own, and returns
// when its context is done; every other method, including the
// prometheus.Collector ones, may be called from any goroutine at any time.
// Failures are never returned: they are counted, kept as LastErr in Stats, and
// logged once per change between "answering" and "failing".
package engine
