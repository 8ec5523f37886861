// The reference covers the schema: every key the parser accepts is in it,
// in the tables its context names, and every field of the typed config
// is some key's.

package config

import (
	"reflect"
	"slices"
	"strings"
	"testing"
)

// tablesOfFile are the TOML tables a file can have (paths without
// indexes), each with the header that opens one: found by following the
// keys that are tables, from the file down.
func tablesOfFile(t *testing.T) map[string]string {
	t.Helper()
	arrays := map[string]bool{"vip": true, "vip.backend": true, "vip.route": true, "vip.route.backend": true, "bgp.peer": true}
	out := map[string]string{}
	var walk func(path string)
	walk = func(path string) {
		for k, isTable := range tableKeys(path) {
			if !isTable {
				continue
			}
			sub := strings.TrimPrefix(path+"."+k, ".")
			out[sub] = "[" + sub + "]"
			if arrays[sub] {
				out[sub] = "[[" + sub + "]]"
			}
			walk(sub)
		}
	}
	walk("")
	if len(out) != 14 {
		t.Fatalf("tables of a file: %v", out)
	}
	return out
}

// setIn is a file that sets key (to 0, or to an empty table) in the table
// at path, opening each table on the way.
func setIn(path, key string, isTable bool, headers map[string]string) string {
	var b strings.Builder
	parts := strings.Split(path, ".")
	for i := range parts {
		b.WriteString(headers[strings.Join(parts[:i+1], ".")] + "\n")
	}
	switch {
	case !isTable:
		b.WriteString(key + " = 0\n")
	case key == "health" || key == "bfd":
		b.WriteString(key + " = {}\n")
	default:
		b.WriteString(key + " = [{}]\n")
	}
	return b.String()
}

// TestEveryAcceptedKeyIsReferenced: for each table of a file, the keys
// the parser takes there (a file setting one gets no "unknown key"
// problem, and a made-up key gets one) are the keys the reference lists
// with that table in their context.
func TestEveryAcceptedKeyIsReferenced(t *testing.T) {
	headers := tablesOfFile(t)
	documented := map[string][]string{} // header -> keys the reference lists there
	for _, s := range Reference() {
		for _, k := range s.Keys {
			for _, c := range k.Context {
				documented[c] = append(documented[c], k.Name)
			}
		}
	}
	for path, header := range headers {
		var accepted []string
		for key, isTable := range tableKeys(path) {
			src := setIn(path, key, isTable, headers)
			if msg := unknownProblem(src); msg != "" {
				t.Errorf("%s %s: the parser refuses it: %s", header, key, msg)
				continue
			}
			accepted = append(accepted, key)
		}
		if unknownProblem(setIn(path, "made_up_key", false, headers)) == "" {
			t.Errorf("%s: the parser takes a made-up key", header)
		}
		slices.Sort(accepted)
		listed := slices.Sorted(slices.Values(documented[header]))
		if !slices.Equal(accepted, listed) {
			t.Errorf("%s: the parser takes %v, the reference lists %v", header, accepted, listed)
		}
	}
}

// unknownProblem is the first problem Parse reports as an unknown key or
// table, or one [defaults] cannot set; "" when there is none.
func unknownProblem(src string) string {
	_, err := Parse("t.toml", []byte(src))
	e, ok := err.(*Error)
	if !ok {
		if err != nil {
			return err.Error()
		}
		return ""
	}
	for _, p := range e.Problems {
		if strings.HasPrefix(p.Msg, "unknown") || strings.Contains(p.Msg, "cannot be set in") {
			return p.String()
		}
	}
	return ""
}

// TestEveryFieldIsAKey: each field of the typed config's tables is filled
// by some row of its key table (its copy moves it), so a field cannot be
// added without a key, a Diff text, a Format line and a page entry.
func TestEveryFieldIsAKey(t *testing.T) {
	fieldsHaveRows(t, globalKeys, nil)
	fieldsHaveRows(t, xdpKeys, nil)
	fieldsHaveRows(t, bgpKeys, nil)
	fieldsHaveRows(t, peerKeys, nil)
	fieldsHaveRows(t, vipKeys, []string{"Line"})
	fieldsHaveRows(t, healthKeys, nil)
	fieldsHaveRows(t, backendKeys, []string{"Line"})
	fieldsHaveRows(t, routeKeys, []string{"Line"})
}

// fieldsHaveRows checks that each field of S but skip is copied by a row.
func fieldsHaveRows[S any](t *testing.T, table []key[S], skip []string) {
	t.Helper()
	typ := reflect.TypeFor[S]()
	for i := range typ.NumField() {
		f := typ.Field(i)
		if !f.IsExported() || slices.Contains(skip, f.Name) {
			continue
		}
		var src S
		if !bump(reflect.ValueOf(&src).Elem().Field(i)) {
			t.Errorf("%s.%s: a field of kind %s: teach bump", typ.Name(), f.Name, f.Type.Kind())
			continue
		}
		copied := false
		for _, k := range table {
			var dst S
			k.val.copy(&dst, &src)
			copied = copied || !reflect.ValueOf(dst).Field(i).IsZero()
		}
		if !copied {
			t.Errorf("%s.%s is no key's: give it a row in its key table", typ.Name(), f.Name)
		}
	}
}
