// Package doccheck checks the project's Markdown documentation: every
// relative link names a file that exists, and every #anchor names a heading
// of the page it points at, by GitHub's rules for heading anchors.
//
// It reads the CommonMark subset the project writes: ATX headings ("## X"),
// inline links and images ("[text](target)", "![alt](target)"), fenced code
// blocks (``` or ~~~) and code spans, inside which nothing is a link.
package doccheck

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"unicode"
)

// Link is one inline link of a Markdown file.
type Link struct {
	Line   int    // 1-based line of the link
	Target string // as written: "docs/x.md#y", "#y", "https://..."
}

var (
	headingRE = regexp.MustCompile(`^ {0,3}(#{1,6})[ \t]+(.*?)[ \t#]*$`)
	// linkRE finds "](target)" after a link's or image's text; the target
	// has no spaces (the project writes no titles).
	linkRE     = regexp.MustCompile(`\]\(([^()\s]+)\)`)
	codeSpanRE = regexp.MustCompile("`+[^`]*`+")
	mdLinkRE   = regexp.MustCompile(`!?\[([^\]]*)\]\([^)]*\)`)
	htmlTagRE  = regexp.MustCompile(`<[^>]+>`)
)

// Slug returns GitHub's anchor for a heading's text: the rendered text in
// lower case, every character that is not a letter, mark, number,
// connector punctuation ("_"), space or hyphen removed, then each space
// replaced by a hyphen. ("### The cluster facade (`--route facade`)" is
// "#the-cluster-facade---route-facade".) Duplicates are Anchors' business.
func Slug(heading string) string {
	text := mdLinkRE.ReplaceAllString(heading, "$1")
	text = htmlTagRE.ReplaceAllString(text, "")
	var b strings.Builder
	for _, r := range strings.ToLower(text) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || unicode.IsLetter(r) || unicode.IsMark(r) || unicode.IsNumber(r) || unicode.Is(unicode.Pc, r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// Parse returns the anchors of a Markdown document's headings (a repeated
// slug gets "-1", "-2", ... as on GitHub) and its inline links, both
// outside fenced code blocks; links inside code spans are left out.
func Parse(md []byte) (anchors map[string]bool, links []Link) {
	anchors = map[string]bool{}
	seen := map[string]int{}
	fence := ""
	sc := bufio.NewScanner(bytes.NewReader(md))
	sc.Buffer(make([]byte, 0, 64*1024), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		trimmed := strings.TrimLeft(line, " ")
		if fence != "" {
			if strings.HasPrefix(trimmed, fence) {
				fence = ""
			}
			continue
		}
		if strings.HasPrefix(trimmed, "```") || strings.HasPrefix(trimmed, "~~~") {
			fence = trimmed[:3]
			continue
		}
		if m := headingRE.FindStringSubmatch(line); m != nil {
			s := Slug(m[2])
			if k := seen[s]; k > 0 {
				anchors[fmt.Sprintf("%s-%d", s, k)] = true
			} else {
				anchors[s] = true
			}
			seen[s]++
		}
		for _, m := range linkRE.FindAllStringSubmatch(codeSpanRE.ReplaceAllString(line, ""), -1) {
			links = append(links, Link{Line: n, Target: m[1]})
		}
	}
	return anchors, links
}

// Check reads the Markdown files (paths relative to root) and returns one
// error per relative link whose file does not exist under root or whose
// #anchor is not a heading of the Markdown page it names. Links with a
// scheme (https:, mailto:) are not followed.
func Check(root string, files []string) []error {
	type page struct {
		anchors map[string]bool
		links   []Link
	}
	pages := map[string]*page{}
	load := func(rel string) (*page, error) {
		if p, ok := pages[rel]; ok {
			return p, nil
		}
		md, err := os.ReadFile(filepath.Join(root, rel))
		if err != nil {
			return nil, err
		}
		a, l := Parse(md)
		p := &page{a, l}
		pages[rel] = p
		return p, nil
	}
	var errs []error
	for _, f := range files {
		p, err := load(f)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, l := range p.links {
			if strings.Contains(l.Target, "://") || strings.HasPrefix(l.Target, "mailto:") {
				continue
			}
			path, anchor, _ := strings.Cut(l.Target, "#")
			target := f
			if path != "" {
				target = filepath.ToSlash(filepath.Clean(filepath.Join(filepath.Dir(f), path)))
				if _, err := os.Stat(filepath.Join(root, target)); err != nil {
					errs = append(errs, fmt.Errorf("%s:%d: link %q: no file %s", f, l.Line, l.Target, target))
					continue
				}
			}
			if anchor == "" {
				continue
			}
			if !strings.HasSuffix(target, ".md") {
				errs = append(errs, fmt.Errorf("%s:%d: link %q: anchor into a file that is not Markdown", f, l.Line, l.Target))
				continue
			}
			tp, err := load(target)
			if err != nil {
				errs = append(errs, fmt.Errorf("%s:%d: link %q: %v", f, l.Line, l.Target, err))
				continue
			}
			if !tp.anchors[anchor] {
				errs = append(errs, fmt.Errorf("%s:%d: link %q: no heading #%s in %s", f, l.Line, l.Target, anchor, target))
			}
		}
	}
	return errs
}
