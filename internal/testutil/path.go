package testutil

import (
	"os/exec"
	"path/filepath"
)

// lookPath finds a program on PATH or in the sbin and PostgreSQL directories
// that a non-login root shell may lack.
func lookPath(name string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	extra, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	for _, d := range append([]string{"/usr/sbin", "/sbin", "/usr/local/sbin"}, extra...) {
		p := filepath.Join(d, name)
		if _, err := exec.LookPath(p); err == nil {
			return p, nil
		}
	}
	return exec.LookPath(name)
}

// LookPath is lookPath for tests that start programs.
func LookPath(name string) (string, error) { return lookPath(name) }
