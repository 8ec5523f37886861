package docpage

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestCheck(t *testing.T) {
	path := filepath.Join(t.TempDir(), "page.md")
	if err := Check(path, []byte("a\nb\n"), true); err != nil {
		t.Fatal(err)
	}
	if err := Check(path, []byte("a\nb\n"), false); err != nil {
		t.Errorf("the page just written: %v", err)
	}
	err := Check(path, []byte("a\nc\n"), false)
	if err == nil || !strings.Contains(err.Error(), "line 2 is\n\tb\nand should be\n\tc") {
		t.Errorf("a stale page: %v", err)
	}
	if err := Check(path, []byte("a\nb\nd\n"), false); err == nil || !strings.Contains(err.Error(), "line 3 is\n\t\nand should be\n\td") {
		t.Errorf("a page missing a line: %v", err)
	}
	os.Remove(path)
	if Check(path, nil, false) == nil {
		t.Error("no page: no error")
	}
}
