package main

import (
	"fmt"
	"sort"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/respmeter/respmeter/configs"
	"github.com/respmeter/respmeter/internal/tlsconf"
)

// flagError is every command's cobra FlagErrorFunc: a usage error, with
// "did you mean" when the error is an unknown long flag (pflag's "unknown
// flag: --NAME") close to one cmd takes. cobra suggests commands only.
func flagError(cmd *cobra.Command, err error) error {
	name, ok := strings.CutPrefix(err.Error(), "unknown flag: --")
	if !ok {
		return usageError(cmd, err)
	}
	name, _, _ = strings.Cut(name, "=")
	if strings.HasSuffix(name, "tls-ciphersuites") { // Redis's and redis-cli's, which Go cannot do
		return usageError(cmd, fmt.Errorf("%w (%w)", err, tlsconf.ErrCipherSuites13))
	}
	if s := suggestFlags(cmd, name); len(s) > 0 {
		err = fmt.Errorf("%w (did you mean %s?)", err, strings.Join(s, " or "))
	}
	return usageError(cmd, err)
}

// maxSuggestions bounds the flags flagError names.
const maxSuggestions = 3

// suggestFlags returns "--flag" for each of cmd's flags (its own and
// those it inherits) within edit distance 2 of name, or having name as a
// prefix (--liste for --listen), nearest first.
func suggestFlags(cmd *cobra.Command, name string) []string {
	type cand struct {
		flag string
		d    int
	}
	var cs []cand
	seen := map[string]bool{}
	visit := func(f *pflag.Flag) {
		if f.Hidden || seen[f.Name] {
			return
		}
		seen[f.Name] = true
		d := configs.EditDistance(strings.ToLower(name), f.Name)
		if strings.HasPrefix(f.Name, name) && name != "" {
			d = min(d, 1)
		}
		if d <= 2 {
			cs = append(cs, cand{"--" + f.Name, d})
		}
	}
	cmd.Flags().VisitAll(visit)
	cmd.InheritedFlags().VisitAll(visit)
	sort.SliceStable(cs, func(i, j int) bool { return cs[i].d < cs[j].d || cs[i].d == cs[j].d && cs[i].flag < cs[j].flag })
	out := make([]string, 0, min(len(cs), maxSuggestions))
	for _, c := range cs[:min(len(cs), maxSuggestions)] {
		out = append(out, c.flag)
	}
	return out
}
