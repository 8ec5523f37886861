// Tests of the line index.

package config

import "testing"

func TestLineIndex(t *testing.T) {
	src := `# comment with [brackets] and key = "value"
top = 1                         # 2
"quoted.key" = 2                # 3
[global]                        # 4
log_level = "info"              # 5
text = """                      # 6
[not_a_table]
not_a_key = 1
"""
after_text = 'x'                # 10
list = [                        # 11
  "a", # [nope]
  "b",
]
after_list = 3                  # 15
[[vip]]                         # 16
name = "a"                      # 17
health.interval = "2s"          # 18
  [[vip.backend]]               # 19
  address = "198.18.1.1:80"     # 20
  [[vip.backend]]               # 21
  address = "198.18.1.2:80"     # 22
[[vip]]                         # 23
name = 'b'                      # 24
  [vip.health]                  # 25
  interval = "1s"               # 26
  [[vip.backend]]               # 27
  weight = 5                    # 28
[[ vip ]]                       # 29
backend = [                     # 30
  { address = "198.18.1.3:80" },  # 31
  { address = "198.18.1.4:80", weight = 7 },  # 32
]
health = { type = "http", path = "/x" } # 34
lit = '''                       # 35
'''
esc = "a \" [b] = c"            # 37
`
	x := indexLines([]byte(src))
	for path, want := range map[string]int{
		"top":                       2,
		`"quoted.key"`:              3,
		"global":                    4,
		"global.log_level":          5,
		"global.text":               6,
		"global.after_text":         10,
		"global.list":               11,
		"global.after_list":         15,
		"vip[0]":                    16,
		"vip[0].name":               17,
		"vip[0].health":             18,
		"vip[0].health.interval":    18,
		"vip[0].backend[0]":         19,
		"vip[0].backend[0].address": 20,
		"vip[0].backend[1].address": 22,
		"vip[1]":                    23,
		"vip[1].name":               24,
		"vip[1].health":             25,
		"vip[1].health.interval":    26,
		"vip[1].backend[0].weight":  28,
		"vip[2]":                    29,
		"vip[2].backend":            30,
		"vip[2].backend[0]":         31,
		"vip[2].backend[0].address": 31,
		"vip[2].backend[1].weight":  32,
		"vip[2].health.path":        34,
		"vip[2].lit":                35,
		"vip[2].esc":                37,
		"vip[1].backend[0].name":    27, // missing: falls back to the backend
		"vip[9].name":               0,  // missing entirely
		"":                          0,
	} {
		if got := x.line(path); got != want {
			t.Errorf("line(%q) = %d, want %d", path, got, want)
		}
	}
	for _, absent := range []string{"global.not_a_key", "not_a_table", "global.nope"} {
		if _, ok := x.byPath[absent]; ok {
			t.Errorf("%q indexed, but it is inside a string or comment", absent)
		}
	}
}

func TestLineIndexBOMAndCRLF(t *testing.T) {
	x := indexLines([]byte("\xef\xbb\xbf[global]\r\nlog_level = \"info\"\r\n\r\n[[vip]]\r\nname = \"a\"\r\n"))
	for path, want := range map[string]int{"global": 1, "global.log_level": 2, "vip[0]": 4, "vip[0].name": 5} {
		if got := x.line(path); got != want {
			t.Errorf("line(%q) = %d, want %d", path, got, want)
		}
	}
}

func TestLineIndexNeverFails(t *testing.T) {
	for _, src := range []string{
		"", "[", "[[", "a", "a =", `a = "unterminated`, "a = '''", "a = [", "a = {",
		"[a.\"b", "= 1", "[[a]]\n[[a.b]]\n[a", "a = [{b = [{c = 1}]}]", "\x00\xff = 1",
	} {
		x := indexLines([]byte(src))
		_ = x.line("a.b")
	}
}

func TestParentPath(t *testing.T) {
	for in, want := range map[string]string{
		"vip[1].backend[0].address": "vip[1].backend[0]",
		"vip[1].backend[0]":         "vip[1].backend",
		"vip[1]":                    "vip",
		"vip":                       "",
	} {
		if got := parentPath(in); got != want {
			t.Errorf("parentPath(%q) = %q, want %q", in, got, want)
		}
	}
}
