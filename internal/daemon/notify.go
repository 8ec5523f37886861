package daemon

import (
	"fmt"
	"net"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// notifier tells a service manager (systemd with Type=notify) when l4lb is
// ready, reloading and stopping, so that `systemctl reload` waits for a
// reload to be applied and nothing signals l4lb before its handlers are
// up. Without NOTIFY_SOCKET it does nothing.
type notifier struct {
	addr string // "" = no service manager listening
}

func newNotifier() notifier {
	addr := os.Getenv("NOTIFY_SOCKET")
	if len(addr) > 0 && addr[0] == '@' {
		addr = "\x00" + addr[1:] // abstract socket namespace
	}
	return notifier{addr: addr}
}

// send writes one state message; a manager that went away is not l4lb's
// failure, so the error is only returned for the caller to log.
func (n notifier) send(state string) error {
	if n.addr == "" {
		return nil
	}
	c, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: n.addr, Net: "unixgram"})
	if err != nil {
		return fmt.Errorf("notify socket: %w", err)
	}
	defer c.Close()
	if _, err := c.Write([]byte(state)); err != nil {
		return fmt.Errorf("notify socket: %w", err)
	}
	return nil
}

func (n notifier) ready() error { return n.send("READY=1\nSTATUS=running") }

func (n notifier) stopping() error { return n.send("STOPPING=1") }

// mainPID hands the service to another process (an upgrade's new l4lb):
// systemd then follows it, and does not stop the service when this one
// exits. Sent by the main process, it needs no NotifyAccess=all.
func (n notifier) mainPID(pid int) error { return n.send(fmt.Sprintf("MAINPID=%d", pid)) }

// readyAsMain is ready from a process that took the service over: it names
// itself the main process too (accepted with NotifyAccess=all; with the
// default NotifyAccess=main, the old process's mainPID came first).
func (n notifier) readyAsMain(pid int) error {
	return n.send(fmt.Sprintf("MAINPID=%d\nREADY=1\nSTATUS=running", pid))
}

// reloading carries the monotonic timestamp systemd requires with
// RELOADING=1 (Type=notify-reload, and plain notify since systemd 253).
func (n notifier) reloading() error {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	usec := ts.Nano() / int64(time.Microsecond)
	return n.send(fmt.Sprintf("RELOADING=1\nMONOTONIC_USEC=%d", usec))
}
