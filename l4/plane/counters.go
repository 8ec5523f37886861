// The counters of the data planes' status structs, each declared once: a
// field's tags say its JSON name, its Prometheus series and help, and its
// place in the text status, and every output reads them from there.

package plane

import (
	"fmt"
	"reflect"
	"strings"

	"github.com/l4lb/l4lb/l4"
)

// Counter is one counter or gauge of a data plane's status struct
// (TCPStatus, UDPStatus, XDPVIPStatus, XDPGuardStatus), as its field's
// tags declare it:
//
//	metric:"NAME"          the Prometheus series, without the l4lb_ prefix
//	metric:"NAME{k=v}"     ... one value of a label that splits the series
//	help:"..."             its help (on the first field of a series)
//	kind:"gauge"           a gauge; counters otherwise
//	text:"LINE/WORD"       the text status line and the word before the
//	                       value; a LINE in parentheses names a line that
//	                       prints no label
//	text:"...,always"      the line shows even when all its values are 0
//	text:"...,bytes"       the value reads as a size (1.5MiB)
//	note:"..."             words after the value
type Counter struct {
	JSON        string // the field's name in status --json
	Metric      string
	Label       string // the label's name, when the series is split ("" = none)
	LabelValue  string
	Help        string
	Gauge       bool
	Line, Word  string
	Note        string
	ShowAlways  bool
	Bytes       bool
	Value       float64
	ValueString string // the value as the text status prints it
}

// Counters lists the counters of s, a pointer to one of the status structs
// (nil: none), in field order, embedded structs in place.
func Counters(s any) []Counter {
	v := reflect.ValueOf(s)
	if !v.IsValid() || v.IsNil() {
		return nil
	}
	var out []Counter
	appendCounters(&out, v.Elem())
	return out
}

func appendCounters(out *[]Counter, v reflect.Value) {
	t := v.Type()
	for i := range t.NumField() {
		f, fv := t.Field(i), v.Field(i)
		if f.Anonymous && f.Type.Kind() == reflect.Struct {
			appendCounters(out, fv)
			continue
		}
		text, ok := f.Tag.Lookup("text")
		if !ok && f.Tag.Get("metric") == "" {
			continue
		}
		c := Counter{Help: f.Tag.Get("help"), Gauge: f.Tag.Get("kind") == "gauge", Note: f.Tag.Get("note")}
		c.JSON, _, _ = strings.Cut(f.Tag.Get("json"), ",")
		c.Metric, c.Label, c.LabelValue = splitMetric(f.Tag.Get("metric"))
		parts := strings.Split(text, ",")
		c.Line, c.Word, _ = strings.Cut(parts[0], "/")
		for _, opt := range parts[1:] {
			c.ShowAlways = c.ShowAlways || opt == "always"
			c.Bytes = c.Bytes || opt == "bytes"
		}
		switch fv.Kind() {
		case reflect.Uint64, reflect.Uint32:
			c.Value, c.ValueString = float64(fv.Uint()), fmt.Sprint(fv.Uint())
		case reflect.Int64, reflect.Int:
			c.Value, c.ValueString = float64(fv.Int()), fmt.Sprint(fv.Int())
		default:
			panic(fmt.Sprintf("status counter %s.%s: a %s, want an integer", t.Name(), f.Name, fv.Kind()))
		}
		if c.Bytes {
			c.ValueString = SizeString(fv.Uint())
		}
		*out = append(*out, c)
	}
}

// splitMetric parses "name{label=value}".
func splitMetric(tag string) (name, label, value string) {
	name, rest, ok := strings.Cut(tag, "{")
	if !ok {
		return tag, "", ""
	}
	label, value, _ = strings.Cut(strings.TrimSuffix(rest, "}"), "=")
	return name, label, value
}

// CounterLines renders counters as the text status does: one line per
// text line in the order the lines first appear, each word followed by
// its value; a line shows when one of its values is not 0, when one of its
// counters says always, or when all is set.
func CounterLines(indent string, cs []Counter, all bool) []string {
	var order []string
	words := map[string][]string{}
	show := map[string]bool{}
	for _, c := range cs {
		if c.Word == "" {
			continue
		}
		key := c.Line
		if _, seen := words[key]; !seen {
			order = append(order, key)
		}
		w := c.Word + " " + c.ValueString
		if c.Note != "" {
			w += " " + c.Note
		}
		words[key] = append(words[key], w)
		show[key] = show[key] || all || c.ShowAlways || c.Value != 0
	}
	var out []string
	for _, key := range order {
		if !show[key] {
			continue
		}
		head := indent
		if !strings.HasPrefix(key, "(") {
			head += key + ": "
		}
		out = append(out, head+strings.Join(words[key], "  "))
	}
	return out
}

// SizeString prints a byte count as the text status does: 512B, 1.5KiB.
func SizeString(n uint64) string {
	v, unit := l4.BinaryUnits(n)
	if unit == "B" {
		return fmt.Sprintf("%dB", n)
	}
	return fmt.Sprintf("%.1f%s", v, unit)
}

// LoadCounters fills the counters of dst (a pointer to a status struct)
// from the atomics of src (a pointer to a plane's stats struct) of the
// same field names, so that a plane's new counter reaches status, JSON and
// metrics without a line of its own; it returns the dst fields src has no
// atomic for (the plane fills those itself).
func LoadCounters(dst, src any) (missing []string) {
	sv := reflect.ValueOf(src).Elem()
	var fill func(d reflect.Value)
	fill = func(d reflect.Value) {
		for i := range d.NumField() {
			f, fv := d.Type().Field(i), d.Field(i)
			if f.Anonymous && f.Type.Kind() == reflect.Struct {
				fill(fv)
				continue
			}
			s := sv.FieldByName(f.Name)
			if !s.IsValid() || !s.CanAddr() {
				missing = append(missing, f.Name)
				continue
			}
			switch a := s.Addr().Interface().(type) {
			case interface{ Load() uint64 }:
				fv.SetUint(a.Load())
			case interface{ Load() int64 }:
				fv.SetInt(a.Load())
			default:
				missing = append(missing, f.Name)
			}
		}
	}
	fill(reflect.ValueOf(dst).Elem())
	return missing
}
