// Layered typed values: built-in default < [defaults] < the table's own key.

package config

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/l4lb/l4lb/l4"
)

// layer resolves the keys of one table into typed values. own is the
// table's key path ("vip[1]", "vip[1].health", "global"); def is its
// [defaults] counterpart ("defaults", "defaults.health"), or "" when the
// table has none. Every value it hands out is checked; a bad one is
// reported at the key it came from and replaced by the built-in default so
// that later checks do not trip over it again.
type layer struct {
	p      *problems
	vip    string            // VIP name for problems
	own    string            // key path of the table
	def    string            // key path of the [defaults] table, or ""
	from   map[string]string // key -> full path of the value in use; absent = built-in
	failed map[string]bool   // keys already reported
}

func newLayer(p *problems, vip, own, def string) *layer {
	return &layer{p: p, vip: vip, own: own, def: def, from: map[string]string{}, failed: map[string]bool{}}
}

// sub returns the layer of a nested table, such as health.
func (l *layer) sub(name string) *layer {
	def := ""
	if l.def != "" {
		def = l.def + "." + name
	}
	return newLayer(l.p, l.vip, l.own+"."+name, def)
}

// at returns the full path of key: where its value came from, or the path
// it would have in this table when the built-in default is in use.
func (l *layer) at(key string) string {
	if path, ok := l.from[key]; ok {
		return path
	}
	return l.own + "." + key
}

// has reports whether the file sets key for this table (here or in [defaults]).
func (l *layer) has(key string) bool {
	_, ok := l.from[key]
	return ok
}

// ok reports whether the file sets key and no problem was found with it yet.
func (l *layer) ok(key string) bool {
	return l.has(key) && !l.failed[key]
}

// ownSet reports whether the table itself sets key (not [defaults]).
func (l *layer) ownSet(key string) bool {
	return l.from[key] == l.own+"."+key
}

// problem reports a problem about key at the place its value came from.
func (l *layer) problem(key, format string, args ...any) {
	l.failed[key] = true
	l.p.add(l.vip, l.at(key), format, args...)
}

// pick returns the table's own value if set, else the [defaults] one, and
// records where it came from.
func pick[T any](l *layer, key string, own, def opt[T]) opt[T] {
	switch {
	case own.set:
		l.from[key] = l.own + "." + key
		return own
	case def.set && l.def != "":
		l.from[key] = l.def + "." + key
		return def
	}
	return opt[T]{}
}

// value resolves key and checks its TOML type.
func value[T any](l *layer, key string, own, def opt[T], builtin T, kind string) T {
	v := pick(l, key, own, def)
	if !v.set {
		return builtin
	}
	if v.bad != nil {
		l.problem(key, "must be %s, not %s", kind, tomlType(v.bad))
		return builtin
	}
	return v.val
}

func (l *layer) str(key string, own, def opt[string], builtin string) string {
	return value(l, key, own, def, builtin, "a string")
}

func (l *layer) boolean(key string, own, def opt[bool], builtin bool) bool {
	return value(l, key, own, def, builtin, "true or false")
}

func (l *layer) float(key string, own, def opt[float64], builtin float64) float64 {
	return value(l, key, own, def, builtin, "a number")
}

// enum resolves a string naming one of an enum's values: names lists
// them all, in the order of their values (l4's XNames functions).
func enum[T ~uint8](l *layer, key string, own, def opt[string], builtin T, names []string) T {
	return parsed(l, key, own, def, builtin, func(s string) (T, bool) { return l4.ParseName[T](s, names) }, names)
}

// parsed resolves a string that parse maps to a value; names lists the
// strings it accepts.
func parsed[T any](l *layer, key string, own, def opt[string], builtin T, parse func(string) (T, bool), names []string) T {
	s := l.str(key, own, def, "")
	if !l.has(key) || l.failed[key] {
		return builtin
	}
	v, ok := parse(s)
	if !ok {
		l.problem(key, "%q is not one of %s", s, strings.Join(names, ", "))
		return builtin
	}
	return v
}

// integer resolves an integer within r.
func (l *layer) integer(key string, own, def opt[int64], builtin int, r bounds[int64]) int {
	n := value(l, key, own, def, int64(builtin), "an integer")
	if !r.has(n) {
		l.problem(key, "%d is out of range %s", n, r)
		return builtin
	}
	return int(n)
}

// duration resolves a duration string ("2s", "1h30m") within r. A number
// needs a unit, as in Go's time.ParseDuration, which also lets "0" go
// without one: nginx reads a bare number as seconds and HAProxy as
// milliseconds, so "30" is refused rather than guessed, whether a string
// or a TOML integer, with the fix in the message; 0 is 0 either way.
func (l *layer) duration(key string, own, def opt[string], builtin time.Duration, r bounds[time.Duration]) time.Duration {
	if v := pick(l, key, own, def); v.set && v.bad != nil {
		switch n, ok := v.bad.(int64); {
		case ok && n == 0 && r.has(0):
			return 0
		case ok && n == 0:
			l.problem(key, "0 is out of range %s", r)
			return builtin
		case ok:
			l.problem(key, "must be a duration string, not the number %d: %s", n, unitHint(strconv.FormatInt(n, 10)))
			return builtin
		}
	}
	s := value(l, key, own, def, "", `a duration string such as "2s"`)
	if !l.ok(key) {
		return builtin
	}
	d, err := time.ParseDuration(s)
	switch {
	case err != nil && isBareNumber(s):
		l.problem(key, "%q has no unit: %s", s, unitHint(s))
	case err != nil:
		l.problem(key, "%q is not a duration (use e.g. \"500ms\", \"2s\", \"1h30m\")", s)
	case d < 0:
		l.problem(key, "%q must not be negative", s)
	case !r.has(d):
		l.problem(key, "%s is out of range %s", fmtDuration(d), r)
	default:
		return d
	}
	return builtin
}

// isBareNumber reports whether s is a number without a unit ("30", "1.5").
func isBareNumber(s string) bool {
	_, err := strconv.ParseFloat(s, 64)
	return err == nil && !strings.HasPrefix(s, "-")
}

// unitHint says how to write the duration n (a bare number) with a unit.
func unitHint(n string) string {
	return fmt.Sprintf("write %q for seconds or %q for milliseconds (nginx reads a bare number as seconds, HAProxy as milliseconds; only 0 needs no unit)", n+"s", n+"ms")
}

// bounds is an inclusive range; with zero set, 0 ("off") is allowed too.
type bounds[T int64 | time.Duration] struct {
	min, max T
	zero     bool
}

// span is the range min..max.
func span[T int64 | time.Duration](min, max T) bounds[T] { return bounds[T]{min: min, max: max} }

// orOff is the range min..max, or 0.
func orOff[T int64 | time.Duration](min, max T) bounds[T] {
	return bounds[T]{min: min, max: max, zero: true}
}

func (b bounds[T]) has(v T) bool {
	return v >= b.min && v <= b.max || b.zero && v == 0
}

func (b bounds[T]) String() string {
	s := fmtValue(b.min) + ".." + fmtValue(b.max)
	if b.zero {
		s = "0 or " + s
	}
	return s
}

func fmtValue[T int64 | time.Duration](v T) string {
	if d, ok := any(v).(time.Duration); ok {
		return fmtDuration(d)
	}
	return strconv.FormatInt(int64(v), 10)
}

// fmtDuration prints 5m rather than 5m0s.
func fmtDuration(d time.Duration) string {
	s := d.String()
	s = strings.TrimSuffix(s, "m0s")
	if len(s) < len(d.String()) {
		s += "m"
	}
	if t := strings.TrimSuffix(s, "h0m"); len(t) < len(s) {
		s = t + "h"
	}
	return s
}

// tomlType names the TOML type of a decoded value.
func tomlType(v any) string {
	switch v.(type) {
	case string:
		return "a string"
	case int64:
		return "an integer"
	case float64:
		return "a float"
	case bool:
		return "a boolean"
	case map[string]any:
		return "a table"
	case []any, []map[string]any:
		return "an array"
	case time.Time:
		return "a date-time"
	}
	return fmt.Sprintf("a %T", v)
}
