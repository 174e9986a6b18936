package payments

import (
	"go/ast"
	"go/parser"
	"go/token"
	"slices"
	"testing"
)

// Codes lists every Code constant of errors.go, so that the status-table
// test of internal/httpapi sees a code as soon as it is added.
func TestCodesListsEveryCode(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), "errors.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST {
			continue
		}
		for _, spec := range g.Specs {
			vs := spec.(*ast.ValueSpec)
			if id, ok := vs.Type.(*ast.Ident); !ok || id.Name != "Code" {
				continue
			}
			for i, name := range vs.Names {
				n++
				lit := vs.Values[i].(*ast.BasicLit).Value
				if !slices.Contains(Codes, Code(lit[1:len(lit)-1])) {
					t.Errorf("Codes does not list %s", name.Name)
				}
			}
		}
	}
	if n != len(Codes) || n == 0 {
		t.Errorf("errors.go declares %d codes, Codes lists %d", n, len(Codes))
	}
}
