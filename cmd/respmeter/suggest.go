package main

import (
	"fmt"
	"sort"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
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
		d := editDistance(strings.ToLower(name), f.Name)
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

// editDistance is the Levenshtein distance between a and b (bytes), with
// a swap of two neighbours counted as one edit (optimal string alignment),
// so that --listne is one edit from --listen.
func editDistance(a, b string) int {
	prev2 := make([]int, len(b)+1)
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(b)]
}
