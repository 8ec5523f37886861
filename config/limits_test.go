// Bounds on hostile input: refused with a clear problem, never decoded.

package config_test

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/l4lb/l4lb/config"
)

func TestParseRefusesHostileShapes(t *testing.T) {
	for _, tc := range []struct {
		name, input, want string
	}{
		{"nested inline tables", "x = " + strings.Repeat("{a=", 8000) + "1" + strings.Repeat("}", 8000), "nested more than 16 deep"},
		{"nested arrays", "x = " + strings.Repeat("[", 8000) + strings.Repeat("]", 8000), "nested more than 16 deep"},
		{"nested in a vip", "[[vip]]\nname = \"a\"\nhealth = " + strings.Repeat("{a=", 17) + "1" + strings.Repeat("}", 17), "nested more than 16 deep"},
		{"long dotted key", strings.Repeat("a.", 16000) + "a = 1", "more than 8 dotted parts"},
		{"long header", "[" + strings.Repeat("a.", 100) + "a]", "more than 8 dotted parts"},
		{"long quoted key", `"` + strings.Repeat("k", 10000) + `" = 1`, "key part of 10002 bytes"},
		{"long key in inline table", "x = {" + strings.Repeat("k", 300) + " = 1}", "key part of 300 bytes"},
		{"too big", "# " + strings.Repeat("x", config.MaxFileSize), "a config file may have at most"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := config.Parse("bad.toml", []byte(tc.input))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Parse = %v, want a problem containing %q", err, tc.want)
			}
			if !strings.HasPrefix(err.Error(), "bad.toml:") {
				t.Fatalf("problem not located in the file: %v", err)
			}
		})
	}
}

// Strings, comments and multi-line arrays that look like nesting or keys
// are not mistaken for them.
func TestShapeCheckKeepsValidInput(t *testing.T) {
	valid := `# [[[[[[[[[[[[[[[[[[ a.b.c.d.e.f.g.h.i.j = 1
[global]
log_level = "info" # {{{{{{{{{{{{{{{{{{{{
[defaults.health]
send = "[[[[[[[[[[[[[[[[[[[[[[[[a.b.c.d.e.f.g.h.i.j"
expect = '''
{{{{{{{{{{{{{{{{{{{{{{{{{{{{
'''
[[vip]]
name = "a"
listen = "198.18.0.1:80"
backend = [
  {address = "198.18.1.1:80"},
  {address = "198.18.1.2:80", weight = 5},
]
`
	if _, err := config.Parse("ok.toml", []byte(valid)); err != nil {
		t.Fatal(err)
	}
}

func TestLoadReadsOnlyRegularFiles(t *testing.T) {
	dir := t.TempDir()
	big := filepath.Join(dir, "big.toml")
	if err := os.WriteFile(big, make([]byte, config.MaxFileSize+1), 0o644); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "fifo.toml")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ path, want string }{
		{fifo, "not a regular file"}, // refused at once, not after a writer comes
		{"/dev/zero", "not a regular file (a device)"},
		{dir, "not a regular file (a directory)"},
		{big, "a config file may have at most"},
		{filepath.Join(dir, "missing.toml"), "no such file"},
	} {
		_, err := config.Load(tc.path)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Load(%s) = %v, want %q", tc.path, err, tc.want)
		}
	}
}
