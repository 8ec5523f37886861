package proxy

import (
	"go/ast"
	"go/parser"
	"go/token"
	"strings"
	"testing"
	"unsafe"
)

// maxStructFields is the most fields a struct of the package has before
// it must say why (structWhy in its doc comment): past it, a reader no
// longer sees which fields go together, and sub-structs by concern say so.
const maxStructFields = 25

// structWhy is what the doc comment of a larger struct says, followed by
// the reason.
const structWhy = "Why so many fields:"

// TestStructsStaySmall holds the package's structs to maxStructFields
// fields (a name list such as `a, b int` counts each name), unless the
// struct's doc comment says why.
func TestStructsStaySmall(t *testing.T) {
	fset, files := packageSources(t, parser.ParseComments)
	for _, f := range files {
		for _, d := range f.Decls {
			gd, ok := d.(*ast.GenDecl)
			if !ok || gd.Tok != token.TYPE {
				continue
			}
			for _, spec := range gd.Specs {
				ts := spec.(*ast.TypeSpec)
				st, ok := ts.Type.(*ast.StructType)
				if !ok {
					continue
				}
				n := fieldCount(st)
				doc := ts.Doc
				if doc == nil {
					doc = gd.Doc
				}
				if n > maxStructFields && !strings.Contains(doc.Text(), structWhy) {
					t.Errorf("%s: %s has %d fields (at most %d): group them by concern, or say %q in its doc comment",
						fset.Position(ts.Pos()), ts.Name.Name, n, maxStructFields, structWhy)
				}
			}
		}
	}
}

// fieldCount counts a struct's fields, each name of a name list and each
// embedded type as one.
func fieldCount(st *ast.StructType) int {
	n := 0
	for _, f := range st.Fields.List {
		n += max(len(f.Names), 1)
	}
	return n
}

// connSizeClass is the Go allocator's size class evConn fits: the next
// one up is 704 bytes, 10% more memory for every connection.
const connSizeClass = 640

// TestConnFitsItsSizeClass: a field that pushes evConn over its size
// class costs every connection the next class; if it is worth that,
// raise connSizeClass here and say so.
func TestConnFitsItsSizeClass(t *testing.T) {
	if n := unsafe.Sizeof(evConn{}); n > connSizeClass {
		t.Fatalf("evConn is %d bytes, over the %d-byte size class (group small fields where padding is)", n, connSizeClass)
	}
}
