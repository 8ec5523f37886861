package archtest

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestPackageDocsSaySo: every package's go doc synopsis starts with
// "Package NAME" (or "Command NAME" for a main package), and it comes from
// doc.go: a comment glued to the package clause of any other file would
// become part of the synopsis, which is how 10 of 20 packages once read
// "The acl LPM trie" or "checker.go: the Checker interface".
func TestPackageDocsSaySo(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", "{{.ImportPath}}\t{{.Name}}\t{{.Dir}}\t{{.Doc}}", mod+"...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.SplitN(line, "\t", 4)
		path, name, dir, doc := f[0], f[1], f[2], f[3]
		want := "Package " + name + " "
		if name == "main" {
			want = "Command " + filepath.Base(path) + " "
		}
		if !strings.HasPrefix(doc, want) {
			t.Errorf("%s: go doc synopsis %q does not start with %q", path, doc, want)
		}
		if _, err := os.Stat(filepath.Join(dir, "doc.go")); err != nil {
			t.Errorf("%s: no doc.go", path)
		}
		gluedComments(t, dir)
	}
}

// gluedComments reports files other than doc.go whose comment ends on the
// line just above the package clause.
func gluedComments(t *testing.T, dir string) {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(dir, "*.go"))
	for _, file := range files {
		if filepath.Base(file) == "doc.go" {
			continue
		}
		fh, err := os.Open(file)
		if err != nil {
			t.Fatal(err)
		}
		prev := ""
		sc := bufio.NewScanner(fh)
		for sc.Scan() {
			line := sc.Text()
			if strings.HasPrefix(line, "package ") {
				if strings.HasPrefix(prev, "//") && !strings.HasPrefix(prev, "//go:") {
					t.Errorf("%s: a comment is glued to the package clause; leave a blank line (package docs live in doc.go)", file)
				}
				break
			}
			prev = line
		}
		fh.Close()
	}
}

// TestPackageMapListsEveryPackage: the package map in docs/development.md
// has a row for every package of the module.
func TestPackageMapListsEveryPackage(t *testing.T) {
	page, err := os.ReadFile("../../docs/development.md")
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("go", "list", mod+"...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, pkg := range strings.Fields(string(out)) {
		rel := strings.TrimPrefix(pkg, mod)
		if !strings.Contains(string(page), "\n| `"+rel+"` | ") {
			t.Errorf("docs/development.md: the package map has no row for %s", rel)
		}
	}
}
