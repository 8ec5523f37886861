// redis.go: a real redis-server for tests, on a loopback port in a temp dir.

package testutil

import (
	"bufio"
	"fmt"
	"net"
	"net/netip"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Redis is a running redis-server.
type Redis struct {
	Addr     netip.AddrPort
	Password string
	ns       *Netns // nil: the root namespace
	cmd      *exec.Cmd
	exited   chan struct{}
}

// StartRedis starts redis-server on addr ("127.0.0.1:0" picks a free
// port), requiring password when not empty, with persistence off. It is
// killed on cleanup.
func StartRedis(t testing.TB, addr string, password string) *Redis {
	t.Helper()
	return StartRedisIn(t, nil, addr, password)
}

// StartRedisIn is StartRedis with the server in namespace ns (nil: the
// root namespace), where addr must exist.
func StartRedisIn(t testing.TB, ns *Netns, addr string, password string) *Redis {
	t.Helper()
	RequireTool(t, "redis-server")
	ap, err := netip.ParseAddrPort(addr)
	if err != nil {
		t.Fatalf("redis address: %v", err)
	}
	if ap.Port() == 0 {
		ap = netip.AddrPortFrom(ap.Addr(), FreePort(t, ns, ap.Addr()))
	}
	r := &Redis{Addr: ap, Password: password, ns: ns, exited: make(chan struct{})}
	bin, _ := lookPath("redis-server")
	args := []string{"--port", strconv.Itoa(int(ap.Port())), "--bind", ap.Addr().String(),
		"--dir", t.TempDir(), "--save", "", "--appendonly", "no", "--daemonize", "no",
		"--protected-mode", "no", "--loglevel", "warning"}
	if password != "" {
		args = append(args, "--requirepass", password)
	}
	if ns != nil {
		args = append([]string{"netns", "exec", ns.Name, bin}, args...)
		bin = "ip" // which execs redis-server: the kill below reaches it
	}
	r.cmd = exec.Command(bin, args...)
	// Killed with the test process even when a panic or -timeout skips cleanups.
	r.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	var out strings.Builder
	r.cmd.Stdout, r.cmd.Stderr = &out, &out
	if err := r.cmd.Start(); err != nil {
		t.Fatalf("redis-server: %v", err)
	}
	go func() { _ = r.cmd.Wait(); close(r.exited) }()
	t.Cleanup(r.kill)
	r.waitReady(t, &out)
	return r
}

// waitReady polls PING until the server answers (about 20 ms).
func (r *Redis) waitReady(t testing.TB, out *strings.Builder) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-r.exited:
			t.Fatalf("redis-server exited: %s", out.String())
		default:
		}
		if reply, err := r.do("PING"); err == nil && (reply == "+PONG" || strings.HasPrefix(reply, "-NOAUTH")) {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("redis-server on %s not ready: %s", r.Addr, out.String())
}

// Do sends one command (after AUTH with the password, if any) and returns
// the first reply line.
func (r *Redis) Do(t testing.TB, args ...string) string {
	t.Helper()
	reply, err := r.do(args...)
	if err != nil {
		t.Fatalf("redis %v: %v", args, err)
	}
	return reply
}

func (r *Redis) do(args ...string) (string, error) {
	var c net.Conn
	dial := func() (err error) {
		c, err = net.DialTimeout("tcp", r.Addr.String(), time.Second)
		return err
	}
	var err error
	if r.ns != nil {
		err = r.ns.Do(dial)
	} else {
		err = dial()
	}
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	br := bufio.NewReader(c)
	if r.Password != "" {
		if _, err := c.Write(respArray("AUTH", r.Password)); err != nil {
			return "", err
		}
		if line, err := br.ReadString('\n'); err != nil || !strings.HasPrefix(line, "+OK") {
			return "", fmt.Errorf("AUTH: %q %v", line, err)
		}
	}
	if _, err := c.Write(respArray(args...)); err != nil {
		return "", err
	}
	line, err := br.ReadString('\n')
	return strings.TrimRight(line, "\r\n"), err
}

// respArray encodes a command as a RESP array of bulk strings.
func respArray(args ...string) []byte {
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	return []byte(b.String())
}

// Stop kills the server and waits for it to exit.
func (r *Redis) Stop() { r.kill() }

func (r *Redis) kill() {
	_ = r.cmd.Process.Kill()
	<-r.exited
}
