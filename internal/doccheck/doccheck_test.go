package doccheck

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// repoRoot is the repository, two directories up from this package.
const repoRoot = "../.."

// docFiles lists the pages the project's readers get: README.md,
// CONTRIBUTING.md, BENCHMARKS.md and every docs/*.md.
func docFiles(t *testing.T) []string {
	t.Helper()
	files := []string{"README.md", "CONTRIBUTING.md", "BENCHMARKS.md"}
	more, err := filepath.Glob(filepath.Join(repoRoot, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range more {
		files = append(files, filepath.ToSlash(strings.TrimPrefix(m, repoRoot+string(filepath.Separator))))
	}
	return files
}

// TestDocsLinksResolve: every relative link and #anchor of the project's
// Markdown resolves.
func TestDocsLinksResolve(t *testing.T) {
	files := docFiles(t)
	if len(files) < 8 {
		t.Fatalf("found only %v", files)
	}
	for _, err := range Check(repoRoot, files) {
		t.Error(err)
	}
}

// TestReadmeLinksEveryDocsPage: each docs/ page is reachable from the
// README, and the README stays a front door (at most 300 lines).
func TestReadmeLinksEveryDocsPage(t *testing.T) {
	md, err := os.ReadFile(filepath.Join(repoRoot, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(md), "\n"); n > 300 {
		t.Errorf("README.md has %d lines, more than 300: move detail into docs/", n)
	}
	_, links := Parse(md)
	var linked []string
	for _, l := range links {
		p, _, _ := strings.Cut(l.Target, "#")
		linked = append(linked, p)
	}
	for _, f := range docFiles(t) {
		if strings.HasPrefix(f, "docs/") && !slices.Contains(linked, f) {
			t.Errorf("README.md does not link %s", f)
		}
	}
}

func TestSlug(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"The cluster facade (`--route facade`)", "the-cluster-facade---route-facade"},
		{"Where did the time go: engine, path, proxy, client", "where-did-the-time-go-engine-path-proxy-client"},
		{"Capture file format (version 2)", "capture-file-format-version-2"},
		{"What was tuned, and what won", "what-was-tuned-and-what-won"},
		{"Shared upstream connections (multiplexing)", "shared-upstream-connections-multiplexing"},
		{"snake_case and [a link](x.md)", "snake_case-and-a-link"},
		{"Latency in µs × 2", "latency-in-µs--2"},
	} {
		if got := Slug(c.in); got != c.want {
			t.Errorf("Slug(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

// TestCheckFindsBrokenLinks: the checker reports a missing file, a missing
// anchor in this page and in another, and ignores links in code.
func TestCheckFindsBrokenLinks(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("docs/b.md", "# B\n\n## Part one\n\n## Part one\n")
	write("a.md", strings.Join([]string{
		"# A",
		"## Here",
		"[ok](docs/b.md#part-one) [dup](docs/b.md#part-one-1) [self](#here) [web](https://x.y/#z)",
		"[gone](docs/c.md) [bad](docs/b.md#part-two) [badself](#there)",
		"`[code](docs/none.md)`",
		"```",
		"[fenced](docs/none.md)",
		"## Not a heading",
		"```",
		"[fencedheading](#not-a-heading)",
	}, "\n"))
	errs := Check(dir, []string{"a.md"})
	var got []string
	for _, e := range errs {
		got = append(got, e.Error())
	}
	want := []string{
		`a.md:4: link "docs/c.md": no file docs/c.md`,
		`a.md:4: link "docs/b.md#part-two": no heading #part-two in docs/b.md`,
		`a.md:4: link "#there": no heading #there in a.md`,
		`a.md:10: link "#not-a-heading": no heading #not-a-heading in a.md`,
	}
	if !slices.Equal(got, want) {
		t.Errorf("errors:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
