// Rendering a man page the way man(1) does, to catch what groff warns
// about.

package docpage

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
)

// RenderMan formats the man page at path with groff's man macros and
// every warning on (groff -ww), and then with man -l when man-db is
// installed. It returns the text, and an error naming each warning.
func RenderMan(path string) (string, error) {
	var out, warn bytes.Buffer
	cmd := exec.Command("groff", "-ww", "-man", "-Tutf8", "-rLL=80n", path)
	cmd.Stdout, cmd.Stderr = &out, &warn
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("groff -ww -man %s: %v\n%s", path, err, warn.Bytes())
	}
	if warn.Len() > 0 {
		return "", fmt.Errorf("groff -ww -man %s warns:\n%s", path, warn.Bytes())
	}
	if _, err := exec.LookPath("man"); err != nil {
		return out.String(), nil
	}
	var mout, mwarn bytes.Buffer
	m := exec.Command("man", "--warnings", "-l", path)
	m.Env = append(os.Environ(), "MANPAGER=cat", "PAGER=cat", "MANWIDTH=80", "LC_ALL=C.UTF-8")
	m.Stdout, m.Stderr = &mout, &mwarn
	if err := m.Run(); err != nil {
		return "", fmt.Errorf("man -l %s: %v\n%s", path, err, mwarn.Bytes())
	}
	if mwarn.Len() > 0 {
		return "", fmt.Errorf("man --warnings -l %s warns:\n%s", path, mwarn.Bytes())
	}
	return out.String(), nil
}
