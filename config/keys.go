// Key tables: each key of the file is one row, declared once, that
// parsing, scope checks, Format, Diff and the reference page read.

package config

import (
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"
)

// key is one row of a key table: a key of the TOML table whose typed form
// is S (VIP, Health, Global...) and everything said about it, once. A
// table's order is the order Format writes its keys in, Diff lists their
// changes in and the reference shows them in; Parse resolves them in it
// too, so a key whose default depends on another comes after it.
type key[S any] struct {
	name string
	val  keyValue[S]
	// scope is where the key applies (nil: wherever its table is). A
	// table that sets a key where it does not apply is refused; a value
	// inherited from [defaults] is reset to the built-in one there, and
	// Format and Diff leave it out.
	scope scope[S]
	// refused is the problem reported when the key is set where it does
	// not apply; "" = "applies only to" and the scope.
	refused string
	// ownOnly: a [[vip]] key that [defaults] cannot set (the VIP's
	// identity, backends and routes).
	ownOnly bool
	// check runs once the key is resolved: checks of its value against
	// itself or the keys before it.
	check func(l *layer, s *S)
	// effect says when a reload applies a changed value ("" = Diff does
	// not compare the key: it is compared apart, or identifies its table);
	// note says what else a running l4lb does about it.
	effect Effect
	note   string
	// reload stands for effect and note in the reference where Diff
	// reports the key's changes apart (a backend's, [bgp]'s).
	reload string
	// doc says what the key does, for the reference; def and rule
	// replace the default and the rule the value gives (a default that
	// depends on other keys, a rule beyond a range).
	doc, def, rule string
}

// keyValue is how a key's value is read, shown and written.
type keyValue[S any] struct {
	// resolve reads the key from its table (own) or the [defaults] one
	// (def) into s, reporting problems to l; nil when another row of the
	// table resolves it together with its own (send_hex with send).
	resolve func(l *layer, key string, own, def rawTable, s *S)
	// text is the value as Diff shows it.
	text func(s *S) string
	// toml is the value as Format writes it, a TOML value; omit (nil:
	// never) says when Format leaves the key out.
	toml func(s *S) string
	omit func(s *S) bool
	// copy copies the key's field from src to dst.
	copy func(dst, src *S)
	// form is how a value is written and rule what it must be (its
	// range), for the reference.
	form, rule string
	// table: the key names a sub-table (subTable).
	table bool
}

// scope is where some keys of a table apply: to some VIPs, to some
// health check types.
type scope[S any] interface {
	applies(s *S) bool
	String() string // where, for the reference: "tcp VIPs in proxy mode"
}

// applies reports whether k applies to s.
func (k *key[S]) applies(s *S) bool { return k.scope == nil || k.scope.applies(s) }

// resolveKeys resolves the keys of table into s, in the table's order.
func resolveKeys[S any](l *layer, table []key[S], own, def rawTable, s *S) {
	for i := range table {
		k := &table[i]
		if k.val.resolve != nil {
			k.val.resolve(l, k.name, own, def, s)
		}
		if k.check != nil {
			k.check(l, s)
		}
	}
}

// writeKeys writes the keys of table that apply to s.
func writeKeys[S any](w *tomlWriter, table []key[S], s *S) {
	for i := range table {
		if k := &table[i]; k.applies(s) && (k.val.omit == nil || !k.val.omit(s)) {
			w.raw(k.name, k.val.toml(s))
		}
	}
}

// compare lists the keys of table whose values differ between o and v,
// among those Diff compares and applies accepts; prefix goes before each
// key ("global.", "health.").
func compare[S any](table []key[S], prefix string, o, v *S, applies func(k *key[S]) bool) []Change {
	var out []Change
	for i := range table {
		k := &table[i]
		if k.effect == "" {
			continue
		}
		if old, cur := k.val.text(o), k.val.text(v); old != cur && applies(k) {
			out = append(out, Change{Key: prefix + k.name, Old: old, New: cur, Effect: k.effect, Note: k.note})
		}
	}
	return out
}

// keepRestartOnly copies into next the running values of the keys of
// table that only a restart applies.
func keepRestartOnly[S any](table []key[S], next, running *S) {
	for i := range table {
		if table[i].effect == EffectRestart {
			table[i].val.copy(next, running)
		}
	}
}

// rowOf returns the row of table named name, or nil.
func rowOf[S any](table []key[S], name string) *key[S] {
	for i := range table {
		if table[i].name == name {
			return &table[i]
		}
	}
	return nil
}

// rawTable is a TOML table of the file as decoded: key -> value.
type rawTable map[string]any

// lookup returns the value of key. Spelled in another case, the key is
// used as well (and reported as unknown: keys are lower case), as the
// decoder matched struct fields: so a misspelt key gives one problem.
func (t rawTable) lookup(key string) (any, bool) {
	if v, ok := t[key]; ok {
		return v, true
	}
	var names []string
	for k := range t {
		if strings.EqualFold(k, key) {
			names = append(names, k)
		}
	}
	if len(names) == 0 {
		return nil, false
	}
	slices.Sort(names)
	return t[names[0]], true
}

// has reports whether t sets key.
func (t rawTable) has(key string) bool {
	_, ok := t.lookup(key)
	return ok
}

// table returns the table under key (nil when there is none).
func (t rawTable) table(key string) rawTable {
	v, _ := t.lookup(key)
	m, _ := v.(map[string]any)
	return m
}

// tables returns the array of tables under key ([[vip]], or an inline
// array of inline tables).
func (t rawTable) tables(key string) []rawTable {
	v, _ := t.lookup(key)
	switch v := v.(type) {
	case []map[string]any:
		out := make([]rawTable, len(v))
		for i, m := range v {
			out[i] = m
		}
		return out
	case []any:
		out := make([]rawTable, len(v))
		for i, e := range v {
			out[i], _ = e.(map[string]any)
		}
		return out
	}
	return nil
}

// get reads key from t as a raw value of type T.
func get[T any](t rawTable, key string) opt[T] {
	var o opt[T]
	if v, ok := t.lookup(key); ok {
		_ = o.UnmarshalTOML(v) // never fails: a value of another type is kept in o.bad
	}
	return o
}

// The kinds of values. Each takes the field the key fills (f) and its
// built-in value, and knows how to resolve, show and write it.

// durationOf is a duration within r.
func durationOf[S any](f func(*S) *time.Duration, def time.Duration, r bounds[time.Duration]) keyValue[S] {
	return keyValue[S]{
		resolve: func(l *layer, key string, own, d rawTable, s *S) {
			*f(s) = l.duration(key, get[string](own, key), get[string](d, key), def, r)
		},
		text: func(s *S) string { return fmtDuration(*f(s)) },
		toml: func(s *S) string { return quoteTOML(fmtDuration(*f(s))) },
		copy: func(dst, src *S) { *f(dst) = *f(src) },
		form: `"DURATION"`,
		rule: r.String(),
	}
}

// intOf is an integer within r.
func intOf[S any, N ~int | ~uint16 | ~uint32](f func(*S) *N, def N, r bounds[int64]) keyValue[S] {
	return intBy(f, func(*S) N { return def }, r)
}

// intBy is an integer within r whose built-in value depends on the keys
// resolved before it.
func intBy[S any, N ~int | ~uint16 | ~uint32](f func(*S) *N, def func(*S) N, r bounds[int64]) keyValue[S] {
	return keyValue[S]{
		resolve: func(l *layer, key string, own, d rawTable, s *S) {
			*f(s) = N(l.integer(key, get[int64](own, key), get[int64](d, key), int(def(s)), r))
		},
		text: func(s *S) string { return strconv.Itoa(int(*f(s))) },
		toml: func(s *S) string { return strconv.Itoa(int(*f(s))) },
		copy: func(dst, src *S) { *f(dst) = *f(src) },
		form: "INTEGER",
		rule: r.String(),
	}
}

// boolOf is true or false.
func boolOf[S any](f func(*S) *bool, def bool) keyValue[S] {
	return keyValue[S]{
		resolve: func(l *layer, key string, own, d rawTable, s *S) {
			*f(s) = l.boolean(key, get[bool](own, key), get[bool](d, key), def)
		},
		text: func(s *S) string { return strconv.FormatBool(*f(s)) },
		toml: func(s *S) string { return strconv.FormatBool(*f(s)) },
		copy: func(dst, src *S) { *f(dst) = *f(src) },
		form: "true | false",
	}
}

// floatOf is a number (an integer is taken too).
func floatOf[S any](f func(*S) *float64, def float64) keyValue[S] {
	show := func(s *S) string { return strconv.FormatFloat(*f(s), 'g', -1, 64) }
	return keyValue[S]{
		resolve: func(l *layer, key string, own, d rawTable, s *S) {
			*f(s) = l.float(key, get[float64](own, key), get[float64](d, key), def)
		},
		text: show,
		toml: func(s *S) string { return show(s) },
		copy: func(dst, src *S) { *f(dst) = *f(src) },
		form: "NUMBER",
	}
}

// enumValue is an l4 enum: a small integer that its names list names.
type enumValue interface {
	~uint8
	String() string
}

// enumOf is one of an l4 enum's names (its XNames list).
func enumOf[S any, T enumValue](f func(*S) *T, def T, names []string) keyValue[S] {
	return enumBy(f, func(*S) T { return def }, names)
}

// enumBy is one of an l4 enum's names, with a built-in value that
// depends on the keys resolved before it.
func enumBy[S any, T enumValue](f func(*S) *T, def func(*S) T, names []string) keyValue[S] {
	show := func(s *S) string { return (*f(s)).String() }
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = strconv.Quote(n)
	}
	return keyValue[S]{
		resolve: func(l *layer, key string, own, d rawTable, s *S) {
			*f(s) = enum(l, key, get[string](own, key), get[string](d, key), def(s), names)
		},
		text: show,
		toml: func(s *S) string { return quoteTOML(show(s)) },
		copy: func(dst, src *S) { *f(dst) = *f(src) },
		form: strings.Join(q, " | "),
	}
}

// stringOf is a string, shown by Diff through show.
func stringOf[S any](f func(*S) *string, def string, show func(string) string) keyValue[S] {
	return keyValue[S]{
		resolve: func(l *layer, key string, own, d rawTable, s *S) {
			*f(s) = l.str(key, get[string](own, key), get[string](d, key), def)
		},
		text: func(s *S) string { return show(*f(s)) },
		toml: func(s *S) string { return quoteTOML(*f(s)) },
		copy: func(dst, src *S) { *f(dst) = *f(src) },
		form: `"STRING"`,
	}
}

// requiredName is the name of a VIP or a route: required, from the table
// itself (never [defaults]), and following the name rule.
func requiredName[S any](f func(*S) *string) keyValue[S] {
	v := stringOf(f, "", func(s string) string { return s })
	v.resolve = func(l *layer, key string, own, _ rawTable, s *S) {
		*f(s) = l.str(key, get[string](own, key), opt[string]{}, "")
		switch {
		case !l.has(key):
			l.problem(key, "is required")
		case l.ok(key):
			l.checkName(key, *f(s))
		}
	}
	v.form, v.rule = `"NAME"`, nameRuleDoc
	return v
}

// prefixesOf is an array of networks.
func prefixesOf[S any](f func(*S) *[]netip.Prefix) keyValue[S] {
	return keyValue[S]{
		resolve: func(l *layer, key string, own, d rawTable, s *S) {
			*f(s) = l.prefixes(key, get[[]any](own, key), get[[]any](d, key))
		},
		text: func(s *S) string { return prefixList(*f(s), strconv.Quote) },
		toml: func(s *S) string { return prefixList(*f(s), quoteTOML) },
		copy: func(dst, src *S) { *f(dst) = *f(src) },
		form: `["NETWORK", ...]`,
	}
}

// omitIf is v, left out by Format where omit holds.
func (v keyValue[S]) omitIf(omit func(s *S) bool) keyValue[S] {
	v.omit = omit
	return v
}

// as is v written in the form form ("HOST:PORT" rather than "STRING").
func (v keyValue[S]) as(form string) keyValue[S] {
	v.form = form
	return v
}

// never is an omit for keys Format never writes.
func never[S any](*S) bool { return true }

// resolvedWithin is v resolved by another row of its table, together
// with that row's own value (send_hex with send).
func (v keyValue[S]) resolvedWithin() keyValue[S] {
	v.resolve = nil
	return v
}

// subTable is a table under the key's table ([vip.health], [[vip.route]]):
// its own keys are the rows of another table, so Parse and Format handle
// it apart. text shows it for Diff (nil when Diff compares it apart).
func subTable[S any](form string, text func(s *S) string, copyIt func(dst, src *S)) keyValue[S] {
	return keyValue[S]{text: text, toml: func(*S) string { return "" }, omit: never[S], copy: copyIt, form: form, table: true}
}

// tableKeys are the keys a TOML table of the file may hold, by its path
// without indexes ("vip.health"; "" is the file itself): true for a key
// that names a table of its own.
func tableKeys(path string) map[string]bool {
	switch path {
	case "":
		return map[string]bool{"global": true, "defaults": true, "vip": true, "xdp": true, "bgp": true, "flow_sync": true}
	case "global":
		return keyNames(globalKeys, nil)
	case "xdp":
		return keyNames(xdpKeys, nil)
	case "bgp":
		return keyNames(bgpKeys, nil)
	case "bgp.peer":
		return keyNames(peerKeys, nil)
	case "bgp.peer.bfd":
		return keyNames(bfdKeys, nil)
	case "flow_sync":
		return keyNames(flowSyncKeys, nil)
	case "defaults":
		return keyNames(vipKeys, func(k *key[VIP]) bool { return !k.ownOnly })
	case "vip":
		return keyNames(vipKeys, nil)
	case "vip.route":
		return keyNames(routeKeys, nil)
	case "defaults.health", "vip.health", "vip.route.health":
		return keyNames(healthKeys, nil)
	case "vip.backend", "vip.route.backend":
		return keyNames(backendKeys, nil)
	}
	return nil
}

// keyNames lists the keys of table that keep accepts (nil: all).
func keyNames[S any](table []key[S], keep func(k *key[S]) bool) map[string]bool {
	out := make(map[string]bool, len(table))
	for i := range table {
		if keep == nil || keep(&table[i]) {
			out[table[i].name] = table[i].val.table
		}
	}
	return out
}
