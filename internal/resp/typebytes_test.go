package resp_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// readersOfRESP are the folders (with everything under them) whose code
// reads RESP replies or requests: a type byte there is named from this
// package (TypeError, IsErrorReply, ...), never written as a character, so
// that what "an error reply" is cannot drift between two places.
var readersOfRESP = []string{"proxy", "internal", "routing/cluster.go", "routing/keys_test.go", "routing/engine_getkeys_test.go", "metrics/engine", "metrics/heat/heat.go", "cmd"}

// notRESP are folders under readersOfRESP that read no RESP: their
// character comparisons (a Markdown anchor's dash) are not type bytes.
var notRESP = []string{filepath.Join("internal", "doccheck")}

// typeBytes are the RESP2/RESP3 type bytes (types.go).
const typeBytes = "+-:$*_,#(!=%~>|;."

// TestNoRawTypeBytes fails on a comparison (==, !=, a switch case) of a
// RESP type-byte character literal outside internal/resp, in the folders
// that read RESP, test files included.
func TestNoRawTypeBytes(t *testing.T) {
	root := filepath.Join("..", "..")
	fset := token.NewFileSet()
	var found []string
	checked := 0
	for _, dir := range readersOfRESP {
		err := filepath.WalkDir(filepath.Join(root, dir), func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel(root, path)
			if d.IsDir() {
				if rel == filepath.Join("internal", "resp") || d.Name() == "testdata" || slices.Contains(notRESP, rel) {
					return filepath.SkipDir
				}
				return nil
			}
			if !strings.HasSuffix(path, ".go") {
				return nil
			}
			f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
			if err != nil {
				return err
			}
			checked++
			for _, pos := range rawTypeByteComparisons(f) {
				p := fset.Position(pos)
				found = append(found, rel+":"+strconv.Itoa(p.Line))
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if checked < 100 {
		t.Fatalf("checked %d Go files: the walk did not find the tree", checked)
	}
	for _, f := range found {
		t.Errorf("%s: a RESP type byte compared as a character literal: use internal/resp's Type constants or IsErrorReply", f)
	}
}

// rawTypeByteComparisons returns the positions in f of comparisons with a
// RESP type-byte character literal.
func rawTypeByteComparisons(f *ast.File) []token.Pos {
	var out []token.Pos
	isTypeByte := func(e ast.Expr) bool {
		lit, ok := ast.Unparen(e).(*ast.BasicLit)
		if !ok || lit.Kind != token.CHAR {
			return false
		}
		c, _, _, err := strconv.UnquoteChar(lit.Value[1:len(lit.Value)-1], '\'')
		return err == nil && strings.ContainsRune(typeBytes, c)
	}
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.BinaryExpr:
			if (n.Op == token.EQL || n.Op == token.NEQ) && (isTypeByte(n.X) || isTypeByte(n.Y)) {
				out = append(out, n.OpPos)
			}
		case *ast.SwitchStmt:
			if n.Tag == nil {
				return true
			}
			for _, c := range n.Body.List {
				for _, e := range c.(*ast.CaseClause).List {
					if isTypeByte(e) {
						out = append(out, e.Pos())
					}
				}
			}
		}
		return true
	})
	return out
}

// TestRawTypeBytesCaught: the check finds each form it looks for, and not
// a comparison with another character.
func TestRawTypeBytesCaught(t *testing.T) {
	const src = `package x
func f(b []byte, c byte) bool {
	switch b[0] {
	case '$', 'a':
	}
	if c == 'z' || b[0] == '0' {
		return true
	}
	return b[0] == '-' || '!' != c
}`
	f, err := parser.ParseFile(token.NewFileSet(), "x.go", src, 0)
	if err != nil {
		t.Fatal(err)
	}
	if got := rawTypeByteComparisons(f); len(got) != 3 {
		t.Errorf("found %d comparisons, want 3 ('$' case, '-' ==, '!' !=)", len(got))
	}
}
