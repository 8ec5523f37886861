// The new process as the old one sees it: started with this process's
// arguments and its end of the socketpair, read with a deadline.

package upgrade

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// upgradeChild is the new process, as its parent sees it.
type upgradeChild struct {
	cmd     *exec.Cmd
	conn    *handoffConn
	timeout time.Duration // to become ready
	exited  chan struct{}
	err     error // its exit status, once exited is closed
}

// startChild starts binary with this process's arguments, environment and
// standard streams, and its end of a socketpair as descriptor 3.
func startChild(binary string) (*upgradeChild, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("socketpair: %w", err)
	}
	theirs := os.NewFile(uintptr(fds[1]), "upgrade")
	defer theirs.Close() // the child has its own copy once started
	conn, err := newHandoffConn(fds[0])
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(binary, os.Args[1:]...)
	cmd.Env = append(envWithout(upgradeFDEnv), upgradeFDEnv+"=3")
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.ExtraFiles = []*os.File{theirs} // descriptor 3
	if err := cmd.Start(); err != nil {
		conn.Close()
		return nil, fmt.Errorf("starting %s: %w", binary, err)
	}
	c := &upgradeChild{cmd: cmd, conn: conn, exited: make(chan struct{})}
	go func() { c.err = cmd.Wait(); close(c.exited) }()
	return c, nil
}

func (c *upgradeChild) pid() int { return c.cmd.Process.Pid }

// expect reads the next message, which must be op; a failed message, an
// exit or silence until deadline is the error.
func (c *upgradeChild) expect(op string, deadline time.Time) (*handoffMsg, error) {
	m, fds, err := c.conn.recv(deadline)
	closeFDs(fds) // the new process sends none
	if err != nil {
		return nil, c.why(err, deadline)
	}
	switch m.Op {
	case op:
		return m, nil
	case opFailed:
		return nil, &problemsError{msg: fmt.Sprintf("the new l4lb (pid %d) refused to start: %s", c.pid(), m.Error), problems: m.Problems}
	}
	return nil, fmt.Errorf("upgrade: the new l4lb sent %q, want %q", m.Op, op)
}

// why explains a failed read from the new process.
func (c *upgradeChild) why(err error, deadline time.Time) error {
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return fmt.Errorf("the new l4lb (pid %d) did not answer in time (it had %v to start; l4lb upgrade --timeout)", c.pid(), c.timeout)
	}
	select {
	case <-c.exited:
	case <-time.After(2 * time.Second):
		return fmt.Errorf("upgrade: reading from the new l4lb (pid %d): %w", c.pid(), err)
	}
	if c.err == nil {
		return fmt.Errorf("the new l4lb (pid %d) exited (status 0) before it took over", c.pid())
	}
	return fmt.Errorf("the new l4lb (pid %d) exited before it took over: %v", c.pid(), c.err)
}

// stop ends a new process that failed (it is this process's child).
func (c *upgradeChild) stop() {
	select {
	case <-c.exited:
	default:
		_ = c.cmd.Process.Kill()
		select {
		case <-c.exited:
		case <-time.After(5 * time.Second):
		}
	}
	c.conn.Close()
}

// envWithout is this process's environment without key.
func envWithout(key string) []string {
	var out []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, key+"=") {
			out = append(out, kv)
		}
	}
	return out
}

// RunningBinary is the path this process was started from, resolved now:
// an upgrade runs what is at that path then (a package update replaces
// the file, and /proc/self/exe would name the deleted one).
func RunningBinary() string {
	exe, err := os.Executable()
	if err != nil {
		return ""
	}
	if r, err := filepath.EvalSymlinks(exe); err == nil {
		exe = r
	}
	return exe
}
