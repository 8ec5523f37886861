package proxy

import (
	"testing"
)

// TestRoutesLookup: exact beats wildcard, the longer wildcard wins, a
// wildcard matches one label or more but not its bare domain, case and a
// trailing dot do not matter.
func TestRoutesLookup(t *testing.T) {
	api, wild, deep, other := &Route{Name: "api"}, &Route{Name: "wild"}, &Route{Name: "deep"}, &Route{Name: "other"}
	rt, err := NewRoutes([]*Route{api, wild, deep, other},
		[][]string{{"api.example.com"}, {"*.example.com"}, {"*.eu.example.com"}, {"Other.Example.ORG."}}, 0, NoRouteDefault)
	if err != nil {
		t.Fatal(err)
	}
	low := make([]byte, maxName)
	for _, c := range []struct {
		name string
		want *Route
	}{
		{"api.example.com", api},
		{"API.Example.Com.", api},
		{"www.example.com", wild},
		{"a.b.example.com", wild},
		{"x.eu.example.com", deep},
		{"eu.example.com", wild},
		{"example.com", nil},
		{"other.example.org", other},
		{"xapi.example.com", wild},
		{"notexample.com", nil},
		{"", nil},
		{".", nil},
	} {
		if got := rt.Lookup([]byte(c.name), low); got != c.want {
			t.Errorf("Lookup(%q) = %v, want %v", c.name, got, c.want)
		}
	}
	if n := testing.AllocsPerRun(100, func() { rt.Lookup([]byte("A.B.EU.Example.com"), low) }); n != 0 {
		t.Fatalf("%v allocations per lookup", n)
	}
	if _, err := NewRoutes([]*Route{api, wild}, [][]string{{"a.example.com"}, {"A.example.com."}}, 0, NoRouteDefault); err == nil {
		t.Fatal("a name listed twice was accepted")
	}
}
