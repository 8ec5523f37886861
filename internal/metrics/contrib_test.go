// contrib/: the Grafana dashboard and the Prometheus alert rules name only
// series l4lb exports (Names), and the rules pass promtool's check and
// their fixtures.

package metrics

import (
	"encoding/json"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/l4lb/l4lb/internal/testutil"
)

const (
	dashboardFile = "../../contrib/grafana/l4lb.json"
	rulesFile     = "../../contrib/prometheus/l4lb-rules.yml"
	rulesTestFile = "../../contrib/prometheus/l4lb-rules.test.yml"
)

var (
	promString   = regexp.MustCompile("\"(?:[^\"\\\\]|\\\\.)*\"|'(?:[^'\\\\]|\\\\.)*'|`[^`]*`")
	promGrouping = regexp.MustCompile(`\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)`)
	promRange    = regexp.MustCompile(`\[[^\]]*\]`)
	promVariable = regexp.MustCompile(`\$\{?\w+\}?`)
	promSelector = regexp.MustCompile(`([a-zA-Z_:][\w:]*)\s*\{([^}]*)\}`)
	promMatcher  = regexp.MustCompile(`([a-zA-Z_]\w*)\s*(?:=~|!~|!=|=)`)
	promToken    = regexp.MustCompile(`\d[\w.]*|([a-zA-Z_:][\w:]*)(\s*\()?`)
	labelValues  = regexp.MustCompile(`^label_values\(\s*(?:([a-zA-Z_:][\w:]*)\s*(?:\{[^}]*\})?\s*,\s*)?(\w+)\s*\)$`)
)

// promKeywords are PromQL's words that are not series names.
var promKeywords = map[string]bool{"and": true, "or": true, "unless": true, "bool": true, "offset": true, "by": true, "without": true,
	"on": true, "ignoring": true, "group_left": true, "group_right": true, "atan2": true, "inf": true, "nan": true, "Inf": true, "NaN": true}

// promqlSeries returns the series names a PromQL expression (Grafana's
// variables allowed) selects, each with the label names its matchers use.
// Function and aggregation names (a word before "(") and keywords are
// not series.
func promqlSeries(expr string) map[string][]string {
	out := map[string][]string{}
	e := promString.ReplaceAllString(expr, `""`)
	e = promVariable.ReplaceAllString(e, "")
	for _, m := range promSelector.FindAllStringSubmatch(e, -1) {
		for _, l := range promMatcher.FindAllStringSubmatch(m[2], -1) {
			out[m[1]] = append(out[m[1]], l[1])
		}
	}
	e = promSelector.ReplaceAllString(e, "$1 ")
	e = promGrouping.ReplaceAllString(e, " ")
	e = promRange.ReplaceAllString(e, " ")
	for _, m := range promToken.FindAllStringSubmatch(e, -1) {
		if m[1] == "" || m[2] != "" || promKeywords[m[1]] {
			continue // a number, a function or a keyword
		}
		if _, ok := out[m[1]]; !ok {
			out[m[1]] = nil
		}
	}
	return out
}

// The extractor finds series and their matchers' labels, not functions,
// keywords, grouping labels, strings, ranges or Grafana's variables.
func TestPromQLSeries(t *testing.T) {
	for expr, want := range map[string]string{
		`sum by (vip) (rate(l4lb_vip_accepted_total{instance=~"$instance", vip=~"a|b"}[$__rate_interval]))`:           "l4lb_vip_accepted_total{instance,vip}",
		`l4lb_vip_eligible_backends == 0 unless on (job, vip) (l4lb_vip_draining == 1)`:                               "l4lb_vip_draining{} l4lb_vip_eligible_backends{}",
		`l4lb:x:rate5m > 2 * (l4lb:y[1h] offset 5m or 0 * vector(0)) and bool atan2 inf`:                              "l4lb:x:rate5m{} l4lb:y{}",
		`count(up{job="l4lb"} == 0) or vector(0)`:                                                                     "up{job}",
		`label_replace(l4lb_backend_up, "dst", "$1", "backend", "(.*)") * on (vip) group_left l4lb_vip_active`:        "l4lb_backend_up{} l4lb_vip_active{}",
		`histogram_quantile(0.99, sum without (instance) (rate(l4lb_nosuch_bucket[5m]))) + l4lb_typo_total{vipp="x"}`: "l4lb_nosuch_bucket{} l4lb_typo_total{vipp}",
	} {
		got := promqlSeries(expr)
		var parts []string
		for name, labels := range got {
			sort.Strings(labels)
			parts = append(parts, name+"{"+strings.Join(labels, ",")+"}")
		}
		sort.Strings(parts)
		if s := strings.Join(parts, " "); s != want {
			t.Errorf("%s:\n got %s\nwant %s", expr, s, want)
		}
	}
}

// rules is the part of a rule file the tests read.
type rules struct {
	Groups []struct {
		Rules []struct {
			Record, Alert, Expr string
		}
	}
}

func readRules(t *testing.T) rules {
	t.Helper()
	var r rules
	data, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(data, &r); err != nil {
		t.Fatalf("%s: %v", rulesFile, err)
	}
	return r
}

// dashboardQueries are the PromQL of every panel's targets and every
// variable's query (a label_values query: its series, when it names one).
func dashboardQueries(t *testing.T) []string {
	t.Helper()
	data, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Panels []struct {
			Title   string
			Targets []struct{ Expr string }
			Panels  []json.RawMessage
		}
		Templating struct {
			List []struct {
				Type  string
				Query json.RawMessage
			}
		}
	}
	if err := json.Unmarshal(data, &d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	var out []string
	for _, p := range d.Panels {
		if len(p.Panels) > 0 {
			t.Errorf("%s: panel %q is a collapsed row: put its panels at the top level, where this test reads them", dashboardFile, p.Title)
		}
		for _, tg := range p.Targets {
			out = append(out, tg.Expr)
		}
	}
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		var q struct{ Query string }
		if err := json.Unmarshal(v.Query, &q); err != nil {
			t.Fatalf("%s: variable query %s: %v", dashboardFile, v.Query, err)
		}
		m := labelValues.FindStringSubmatch(q.Query)
		if m == nil {
			t.Fatalf("%s: variable query %q is not label_values(SERIES, LABEL)", dashboardFile, q.Query)
		}
		if m[1] != "" { // its series, and the label it lists as a matcher would name it
			out = append(out, q.Query[len("label_values("):strings.LastIndexByte(q.Query, ',')], m[1]+"{"+m[2]+`=~".+"}`)
		}
	}
	return out
}

// fixtureSeries are the series the promtool fixtures feed in.
func fixtureSeries(t *testing.T) []string {
	t.Helper()
	var f struct {
		Tests []struct {
			InputSeries []struct{ Series string } `yaml:"input_series"`
		}
	}
	data, err := os.ReadFile(rulesTestFile)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(data, &f); err != nil {
		t.Fatalf("%s: %v", rulesTestFile, err)
	}
	var out []string
	for _, tc := range f.Tests {
		for _, s := range tc.InputSeries {
			out = append(out, s.Series)
		}
	}
	return out
}

// Every series the dashboard, the rules and their fixtures name is one
// l4lb exports (Names, read from the collector's declarations) or one the
// rules record, and every label their matchers name is one of its labels
// (or job and instance, which the scrape adds).
func TestContribNamesExported(t *testing.T) {
	exported := Names()
	recorded := map[string]bool{}
	r := readRules(t)
	var exprs []string
	for _, g := range r.Groups {
		for _, rule := range g.Rules {
			if rule.Record != "" {
				recorded[rule.Record] = true
			}
			exprs = append(exprs, rule.Expr)
		}
	}
	sources := map[string][]string{dashboardFile: dashboardQueries(t), rulesFile: exprs, rulesTestFile: fixtureSeries(t)}
	for file, exprs := range sources {
		if len(exprs) < 5 {
			t.Errorf("%s: %d expressions read, want the file's every one", file, len(exprs))
		}
		named := 0
		for _, expr := range exprs {
			for name, labels := range promqlSeries(expr) {
				named++
				known, ok := exported[name]
				switch {
				case recorded[name]:
					continue
				case !ok:
					t.Errorf("%s: %q names %s, which l4lb does not export", file, expr, name)
					continue
				}
				for _, l := range labels {
					if l != "job" && l != "instance" && !slices.Contains(known, l) {
						t.Errorf("%s: %q matches label %s of %s, which has only %v (and job, instance)", file, expr, l, name, known)
					}
				}
			}
		}
		if named == 0 {
			t.Errorf("%s: no series found", file)
		}
	}
}

// The rules pass `promtool check rules` (syntax, templates, duplicates)
// and `promtool test rules` on their fixtures, which make every alert
// fire and not fire.
func TestAlertRules(t *testing.T) {
	testutil.RequireTool(t, "promtool")
	for _, args := range [][]string{{"check", "rules", rulesFile}, {"test", "rules", rulesTestFile}} {
		out, err := exec.Command("promtool", args...).CombinedOutput()
		if err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	fired, quiet := fixtureOutcomes(t)
	for _, g := range readRules(t).Groups {
		for _, rule := range g.Rules {
			if rule.Alert != "" && (!fired[rule.Alert] || !quiet[rule.Alert]) {
				t.Errorf("alert %s: the fixtures make it fire: %v, leave it quiet: %v; want both", rule.Alert, fired[rule.Alert], quiet[rule.Alert])
			}
		}
	}
}

// fixtureOutcomes reads which alerts the fixtures expect to fire at some
// evaluation, and which to be quiet at another.
func fixtureOutcomes(t *testing.T) (fired, quiet map[string]bool) {
	t.Helper()
	var f struct {
		Tests []struct {
			AlertRuleTest []struct {
				Alertname string
				ExpAlerts []any `yaml:"exp_alerts"`
			} `yaml:"alert_rule_test"`
		}
	}
	data, err := os.ReadFile(rulesTestFile)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(data, &f); err != nil {
		t.Fatalf("%s: %v", rulesTestFile, err)
	}
	fired, quiet = map[string]bool{}, map[string]bool{}
	for _, tc := range f.Tests {
		for _, a := range tc.AlertRuleTest {
			if len(a.ExpAlerts) > 0 {
				fired[a.Alertname] = true
			} else {
				quiet[a.Alertname] = true
			}
		}
	}
	return fired, quiet
}

// The dashboard is one Grafana can import: panel ids unique, every panel
// on the 24-column grid without overlapping another, every query panel
// on the dashboard's data source variable with at least one query, and
// that variable declared.
func TestDashboardLayout(t *testing.T) {
	data, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	type grid struct{ H, W, X, Y int }
	var d struct {
		UID, Title string
		Panels     []struct {
			ID         int
			Type       string
			Title      string
			GridPos    grid
			Datasource struct{ UID string }
			Targets    []struct {
				Expr       string
				Datasource struct{ UID string }
			}
		}
		Templating struct {
			List []struct{ Name, Type string }
		}
	}
	if err := json.Unmarshal(data, &d); err != nil {
		t.Fatal(err)
	}
	if d.UID == "" || d.Title == "" {
		t.Errorf("dashboard uid %q title %q", d.UID, d.Title)
	}
	hasDS := false
	for _, v := range d.Templating.List {
		hasDS = hasDS || v.Name == "datasource" && v.Type == "datasource"
	}
	if !hasDS {
		t.Error("no datasource variable: the panels' ${datasource} has nothing to name")
	}
	ids := map[int]string{}
	var placed []grid
	for _, p := range d.Panels {
		if prev, dup := ids[p.ID]; dup || p.ID == 0 {
			t.Errorf("panel %q: id %d (also %q)", p.Title, p.ID, prev)
		}
		ids[p.ID] = p.Title
		g := p.GridPos
		if g.W <= 0 || g.H <= 0 || g.X < 0 || g.X+g.W > 24 {
			t.Errorf("panel %q: grid %+v off the 24 columns", p.Title, g)
		}
		for _, o := range placed {
			if g.X < o.X+o.W && o.X < g.X+g.W && g.Y < o.Y+o.H && o.Y < g.Y+g.H {
				t.Errorf("panel %q at %+v overlaps one at %+v", p.Title, g, o)
			}
		}
		placed = append(placed, g)
		if p.Type == "row" {
			continue
		}
		if p.Datasource.UID != "${datasource}" || len(p.Targets) == 0 {
			t.Errorf("panel %q: data source %q, %d queries", p.Title, p.Datasource.UID, len(p.Targets))
		}
		for _, tg := range p.Targets {
			if tg.Datasource.UID != "${datasource}" || tg.Expr == "" {
				t.Errorf("panel %q: query %q on %q", p.Title, tg.Expr, tg.Datasource.UID)
			}
		}
	}
	if len(placed) < 20 {
		t.Errorf("%d panels", len(placed))
	}
}
