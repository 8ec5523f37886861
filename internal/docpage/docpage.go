// Writing a page, and comparing it with the committed one.

package docpage

import (
	"bytes"
	"fmt"
	"os"
	"strings"
)

// Write writes page to the file out, or to standard output when out is "".
func Write(out string, page []byte) error {
	if out == "" {
		_, err := os.Stdout.Write(page)
		return err
	}
	return os.WriteFile(out, page, 0o644)
}

// Check reports whether the committed page at path is want, naming the
// first line that differs; with update it rewrites the page instead.
func Check(path string, want []byte, update bool) error {
	if update {
		return os.WriteFile(path, want, 0o644)
	}
	got, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if bytes.Equal(got, want) {
		return nil
	}
	g, w := strings.Split(string(got), "\n"), strings.Split(string(want), "\n")
	i := 0
	for i < len(g) && i < len(w) && g[i] == w[i] {
		i++
	}
	return fmt.Errorf("%s is not what its generator makes: run `make docs` and commit it.\nline %d is\n\t%s\nand should be\n\t%s", path, i+1, lineOf(g, i), lineOf(w, i))
}

func lineOf(lines []string, i int) string {
	if i < len(lines) {
		return lines[i]
	}
	return "(end of page)"
}
