// Command respmeter is a RESP-aware measuring proxy: it sits between Redis
// clients and a Redis-compatible server, forwards every command unchanged
// and records per-command latency, exposed as Prometheus metrics and a
// percentile table.
//
// Subcommands: proxy (run the proxy), demo (a self-contained tour), report
// (summarize HdrHistogram interval logs), version.
// Run "respmeter --help" for details. Exit codes: 0 success, 1 runtime
// failure, 2 usage or configuration error.
package main

import (
	"context"
	"os"
)

func main() {
	os.Exit(run(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
}
