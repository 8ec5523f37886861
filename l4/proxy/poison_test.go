package proxy

import (
	"go/ast"
	"strings"
	"testing"
)

// livenessExempt are the methods of connections and sessions that may
// run on a freed struct by design: each looks at the generation or the
// state first and does nothing with a struct that ended.
var livenessExempt = map[string]string{
	"evConn.pending":       "a stale timer's question: generation and state only",
	"evConn.ended":         "the state read that callers make after a call that may end the connection",
	"evConn.again":         "a stale again turn: generation and state first",
	"evConn.onTimer":       "asks pending first, then asserts",
	"evConn.mustLive":      "the assertion itself",
	"loopSession.again":    "a stale again turn: generation and open first",
	"loopSession.mustLive": "the assertion itself",
}

// livenessFuncs are functions of other receivers that act on a connection
// or session they are given, so they assert it first too.
var livenessFuncs = map[string]string{
	"TCPService.evConnDone":   "c",
	"TCPService.trackEv":      "c",
	"TCPService.untrackEv":    "c",
	"TCPService.logConn":      "c",
	"UDPService.closeSession": "sess",
}

// TestMethodsAssertLive holds the rule that makes a use after free
// impossible to miss in l4lbpoison builds: every method of evConn and
// loopSession (but the exempt ones, which check the generation or state
// themselves) and every function that acts on one it is given begins by
// asserting that it is live.
func TestMethodsAssertLive(t *testing.T) {
	fset, files := packageSources(t, 0)
	checked := 0
	seen := map[string]bool{}
	for _, f := range files {
		for _, d := range f.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Recv == nil || fn.Body == nil {
				continue
			}
			recvName, recvType := receiver(fn)
			key := recvType + "." + fn.Name.Name
			want := ""
			switch {
			case livenessExempt[key] != "":
				seen[key] = true
				continue
			case recvType == "evConn" || recvType == "loopSession":
				want = recvName
			case livenessFuncs[key] != "":
				want = livenessFuncs[key]
				seen[key] = true
			default:
				continue
			}
			checked++
			if !startsWithMustLive(fn, want) {
				t.Errorf("%s: %s does not begin with %s.mustLive()", fset.Position(fn.Pos()), key, want)
			}
		}
	}
	for key := range livenessExempt {
		if !seen[key] && !strings.HasSuffix(key, ".mustLive") {
			t.Errorf("exempt method %s no longer exists: drop it from the list", key)
		}
	}
	for key := range livenessFuncs {
		if !seen[key] {
			t.Errorf("function %s no longer exists: drop it from the list", key)
		}
	}
	if checked < 60 {
		t.Fatalf("only %d methods checked: the test no longer finds them", checked)
	}
}

// receiver returns a method's receiver name and type name (without *).
func receiver(fn *ast.FuncDecl) (string, string) {
	field := fn.Recv.List[0]
	typ := field.Type
	if star, ok := typ.(*ast.StarExpr); ok {
		typ = star.X
	}
	ident, _ := typ.(*ast.Ident)
	name := ""
	if len(field.Names) > 0 {
		name = field.Names[0].Name
	}
	if ident == nil {
		return name, ""
	}
	return name, ident.Name
}

// startsWithMustLive reports whether fn's first statement is v.mustLive().
func startsWithMustLive(fn *ast.FuncDecl, v string) bool {
	if len(fn.Body.List) == 0 {
		return false
	}
	es, ok := fn.Body.List[0].(*ast.ExprStmt)
	if !ok {
		return false
	}
	call, ok := es.X.(*ast.CallExpr)
	if !ok {
		return false
	}
	sel, ok := call.Fun.(*ast.SelectorExpr)
	if !ok || sel.Sel.Name != "mustLive" {
		return false
	}
	id, ok := sel.X.(*ast.Ident)
	return ok && id.Name == v
}
