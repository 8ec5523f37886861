// mdwe runs a program with the kernel's memory-deny-write-execute policy
// (PR_SET_MDWE, what systemd's MemoryDenyWriteExecute= asks for) and
// no_new_privs: e2e_privs_test.go runs l4lb under it.

package main

import (
	"fmt"
	"os"
	"os/exec"
	"syscall"

	"golang.org/x/sys/unix"
)

const (
	prSetMDWE            = 65
	prMDWERefuseExecGain = 1
)

func main() {
	if err := unix.Prctl(prSetMDWE, prMDWERefuseExecGain, 0, 0, 0); err != nil {
		fmt.Fprintln(os.Stderr, "mdwe: PR_SET_MDWE:", err)
		os.Exit(111)
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		fmt.Fprintln(os.Stderr, "mdwe: PR_SET_NO_NEW_PRIVS:", err)
		os.Exit(111)
	}
	path, err := exec.LookPath(os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, "mdwe:", err)
		os.Exit(111)
	}
	fmt.Fprintln(os.Stderr, "mdwe:", syscall.Exec(path, os.Args[1:], os.Environ()))
	os.Exit(111)
}
