package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// TestFlagTypoSuggestions: in every subcommand, each flag of four letters
// or more, given with two of its letters swapped (--listne) or its last
// letter dropped (--liste), is a usage error (exit 2) that names the flag
// ("did you mean --listen?"); a word far from every flag gets no guess.
func TestFlagTypoSuggestions(t *testing.T) {
	a := &app{lookupEnv: func(string) (string, bool) { return "", false }, environ: func() []string { return nil }}
	var walk func(c *cobra.Command, path []string)
	checked := 0
	walk = func(c *cobra.Command, path []string) {
		for _, sub := range c.Commands() {
			walk(sub, append(append([]string(nil), path...), sub.Name()))
		}
		if len(path) == 0 {
			return
		}
		c.Flags().VisitAll(func(f *pflag.Flag) {
			n := f.Name
			if len(n) < 4 || f.Hidden {
				return
			}
			swapped := n[:len(n)-2] + string(n[len(n)-1]) + string(n[len(n)-2])
			for _, typo := range []string{swapped, n[:len(n)-1]} {
				if c.Flags().Lookup(typo) != nil || typo == n {
					continue
				}
				var out, errb bytes.Buffer
				a.stdout, a.stderr = &out, &errb
				code := a.run(context.Background(), append(append([]string(nil), path...), "--"+typo))
				checked++
				if code != exitUsage || !strings.Contains(errb.String(), "unknown flag: --"+typo+" (did you mean ") ||
					!strings.Contains(errb.String(), "--"+n) {
					t.Errorf("%s --%s: exit %d, want %d suggesting --%s:\n%s", strings.Join(path, " "), typo, code, exitUsage, n, errb.String())
				}
			}
		})
	}
	walk(a.rootCmd(), nil)
	if checked < 50 {
		t.Errorf("%d typos checked: the walk missed the subcommands' flags", checked)
	}
	var out, errb bytes.Buffer
	a.stdout, a.stderr = &out, &errb
	if code := a.run(context.Background(), []string{"proxy", "--zzzzzzzz"}); code != exitUsage || strings.Contains(errb.String(), "did you mean") {
		t.Errorf("proxy --zzzzzzzz: exit %d, want %d and no guess:\n%s", code, exitUsage, errb.String())
	}
}
