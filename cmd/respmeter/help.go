package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// helpColumns is the width "respmeter proxy --help" is wrapped to.
const helpColumns = 100

// proxyGroups are the groups of "respmeter proxy --help", in the order shown.
var proxyGroups = []struct{ key, title string }{
	{"config", "Configuration"},
	{"listen", "Listen"},
	{"upstream", "Upstream"},
	{"tls", "TLS (docs/tls.md)"},
	{"routing", "Routing (docs/routing.md, docs/shared.md)"},
	{"measuring", "Measuring (docs/measuring.md)"},
	{"exports", "Exports (docs/metrics.md)"},
	{"limits", "Limits"},
	{"capture", "Capture and fault injection (docs/capture-replay.md, docs/injection.md)"},
}

// proxyFlagGroup names the --help group of every "respmeter proxy" flag:
// a new flag needs one entry here, and TestProxyFlagsGrouped fails until it
// has one. A flag without a group is still shown, under "Other".
var proxyFlagGroup = map[string]string{
	"config": "config",
	"check":  "config",
	"help":   "config",

	"listen":           "listen",
	"admin":            "listen",
	"admin-token-file": "listen",
	"loops":            "listen",
	"log-level":        "listen",
	"log-format":       "listen",

	"upstream":          "upstream",
	"upstream-user":     "upstream",
	"upstream-password": "upstream",
	"dial-timeout":      "upstream",
	"upstream-timeout":  "upstream",

	"tls-listen":                        "tls",
	"tls-cert-file":                     "tls",
	"tls-key-file":                      "tls",
	"tls-ca-cert-file":                  "tls",
	"tls-auth-clients":                  "tls",
	"tls-handshake-timeout":             "tls",
	"upstream-tls":                      "tls",
	"facade-tls":                        "tls",
	"upstream-tls-ca-cert-file":         "tls",
	"upstream-tls-cert-file":            "tls",
	"upstream-tls-key-file":             "tls",
	"upstream-tls-server-name":          "tls",
	"upstream-tls-protocols":            "tls",
	"upstream-tls-ciphers":              "tls",
	"tls-protocols":                     "tls",
	"tls-ciphers":                       "tls",
	"upstream-tls-insecure-skip-verify": "tls",

	"route":            "routing",
	"shards":           "routing",
	"shard-zones":      "routing",
	"cluster":          "routing",
	"facade-listen":    "routing",
	"topology-refresh": "routing",
	"pin-by":           "routing",
	"upstream-mode":    "routing",
	"upstream-conns":   "routing",

	"measure":           "measuring",
	"heat":              "measuring",
	"heat-sample":       "measuring",
	"key-names":         "measuring",
	"hdr-interval":      "measuring",
	"probe-interval":    "measuring",
	"engine-poll":       "measuring",
	"slowlog-threshold": "measuring",
	"slowlog-len":       "measuring",

	"hdr-log":           "exports",
	"summary":           "exports",
	"heat-metrics-keys": "exports",
	"metrics-phases":    "exports",
	"metrics-commands":  "exports",

	"client-output-limit": "limits",
	"client-query-limit":  "limits",
	"max-clients":         "limits",
	"drain-timeout":       "limits",

	"capture":          "capture",
	"capture-dir":      "capture",
	"capture-duration": "capture",
	"capture-sample":   "capture",
	"capture-redact":   "capture",

	"inject": "capture",
}

// groupedUsage writes cmd's usage with its flags in the groups of groups
// and group (flag name -> group key), each group's flags wrapped to
// helpColumns, then cmd's examples. It is a cobra usage function.
func groupedUsage(cmd *cobra.Command, groups []struct{ key, title string }, group map[string]string) error {
	var b strings.Builder
	fmt.Fprintf(&b, "Usage:\n  %s\n", cmd.UseLine())
	sets := map[string]*pflag.FlagSet{}
	other := pflag.NewFlagSet("other", pflag.ContinueOnError)
	cmd.Flags().VisitAll(func(f *pflag.Flag) {
		if f.Hidden {
			return
		}
		fs := other
		if g, ok := group[f.Name]; ok {
			if fs = sets[g]; fs == nil {
				fs = pflag.NewFlagSet(g, pflag.ContinueOnError)
				fs.SortFlags = false
				sets[g] = fs
			}
		}
		fs.AddFlag(f)
	})
	write := func(title string, fs *pflag.FlagSet) {
		if fs == nil || !fs.HasFlags() {
			return
		}
		fmt.Fprintf(&b, "\n%s:\n%s", title, fs.FlagUsagesWrapped(helpColumns))
	}
	for _, g := range groups {
		write(g.title, sets[g.key])
	}
	write("Other", other)
	if cmd.HasExample() {
		fmt.Fprintf(&b, "\nExamples:\n%s\n", cmd.Example)
	}
	_, err := io.WriteString(cmd.OutOrStderr(), b.String())
	return err
}
