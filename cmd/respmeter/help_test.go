package main

import (
	"bytes"
	"context"
	"os"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/spf13/pflag"
)

// proxyFlagSet returns the flags of "respmeter proxy", --help included.
func proxyFlagSet(t *testing.T) *pflag.FlagSet {
	t.Helper()
	a := &app{stdout: &bytes.Buffer{}, stderr: &bytes.Buffer{}, lookupEnv: func(string) (string, bool) { return "", false }, environ: func() []string { return nil }}
	cmd := a.proxyCmd()
	cmd.InitDefaultHelpFlag()
	return cmd.Flags()
}

// TestProxyFlagsGrouped: every flag of "respmeter proxy" has a --help group
// (proxyFlagGroup in help.go), every group is one --help shows, and the
// map names no flag that does not exist.
func TestProxyFlagsGrouped(t *testing.T) {
	var keys []string
	for _, g := range proxyGroups {
		keys = append(keys, g.key)
	}
	seen := map[string]bool{}
	proxyFlagSet(t).VisitAll(func(f *pflag.Flag) {
		seen[f.Name] = true
		g, ok := proxyFlagGroup[f.Name]
		switch {
		case !ok:
			t.Errorf("--%s has no group: add it to proxyFlagGroup in cmd/respmeter/help.go", f.Name)
		case !slices.Contains(keys, g):
			t.Errorf("--%s: group %q is not in proxyGroups %v", f.Name, g, keys)
		}
	})
	for name := range proxyFlagGroup {
		if !seen[name] {
			t.Errorf("proxyFlagGroup names --%s, which respmeter proxy does not have", name)
		}
	}
}

// TestProxyHelpFits: "respmeter proxy --help" fits one screen: at most 100
// lines, none wider than 100 columns, at most 20 lines of prose before the
// flags, every flag shown under its group, the groups in order.
func TestProxyHelpFits(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"proxy", "--help"}, &out, &errb); code != exitOK {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	help := out.String()
	lines := strings.Split(strings.TrimRight(help, "\n"), "\n")
	if len(lines) > 100 {
		t.Errorf("%d lines, more than 100", len(lines))
	}
	for i, l := range lines {
		if n := utf8.RuneCountInString(l); n > helpColumns {
			t.Errorf("line %d has %d columns, more than %d: %q", i+1, n, helpColumns, l)
		}
	}
	prose, _, ok := strings.Cut(help, "\nUsage:\n")
	if !ok {
		t.Fatalf("no Usage: section:\n%s", help)
	}
	if n := strings.Count(strings.TrimSpace(prose), "\n") + 1; n > 20 {
		t.Errorf("%d lines of prose before Usage:, more than 20", n)
	}
	at := len(prose)
	for _, g := range proxyGroups {
		i := strings.Index(help, "\n"+g.title+":\n")
		if i < at {
			t.Errorf("group %q missing or out of order", g.title)
			continue
		}
		at = i
	}
	if strings.Contains(help, "\nOther:\n") {
		t.Errorf("flags without a group are shown under Other:\n%s", help)
	}
	proxyFlagSet(t).VisitAll(func(f *pflag.Flag) {
		if !strings.Contains(help, "--"+f.Name+" ") {
			t.Errorf("--%s is not in --help", f.Name)
		}
	})
	// The environment variables are given by their rule, not listed.
	if n := strings.Count(help, "RESPMETER_"); n > 5 {
		t.Errorf("RESPMETER_ appears %d times: give the rule, not a list", n)
	}
}

// TestProxyFlagsDocumented: every flag of "respmeter proxy" is described
// in docs/configuration.md (as `--flag`).
func TestProxyFlagsDocumented(t *testing.T) {
	doc, err := os.ReadFile("../../docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	proxyFlagSet(t).VisitAll(func(f *pflag.Flag) {
		if f.Name == "help" {
			return
		}
		if !bytes.Contains(doc, []byte("`--"+f.Name)) {
			t.Errorf("--%s is not documented in docs/configuration.md", f.Name)
		}
	})
}
