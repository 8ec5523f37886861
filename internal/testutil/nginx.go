// nginx.go: a real nginx for tests, an HTTP server that may require the PROXY protocol header.

package testutil

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Nginx is a running nginx answering 200 "ok" to every HTTP request.
type Nginx struct {
	Addr   netip.AddrPort
	dir    string
	ns     *Netns
	cmd    *exec.Cmd
	exited chan struct{}
}

// nginxConf is a one-process nginx (no master, no workers to orphan)
// whose files all live in one temp dir. The access log records the
// address the PROXY header carried ("-" without one).
const nginxConf = `daemon off;
master_process off;
pid %[1]s/nginx.pid;
error_log %[1]s/error.log info;
events { worker_connections 64; }
http {
  log_format pp '$remote_addr proxy=$proxy_protocol_addr:$proxy_protocol_port status=$status';
  access_log %[1]s/access.log pp;
  client_body_temp_path %[1]s/body;
  proxy_temp_path %[1]s/proxy;
  fastcgi_temp_path %[1]s/fastcgi;
  uwsgi_temp_path %[1]s/uwsgi;
  scgi_temp_path %[1]s/scgi;
  server {
    listen %[2]s%[3]s;
    location / { return 200 "ok\n"; }
  }
}
`

// StartNginxIn starts nginx in namespace ns (nil: the root namespace) on
// addr, which must exist there (port 0 picks a free one). With
// proxyProtocol it requires a PROXY header (v1 or v2) on every connection
// (listen ... proxy_protocol), as a backend behind a balancer that sends
// one does: a connection without it is closed and logged ("broken
// header"). It is killed on cleanup.
func StartNginxIn(t testing.TB, ns *Netns, addr string, proxyProtocol bool) *Nginx {
	t.Helper()
	RequireTool(t, "nginx")
	ap, err := netip.ParseAddrPort(addr)
	if err != nil {
		t.Fatalf("nginx address: %v", err)
	}
	if ap.Port() == 0 {
		ap = netip.AddrPortFrom(ap.Addr(), FreePort(t, ns, ap.Addr()))
	}
	n := &Nginx{Addr: ap, dir: t.TempDir(), ns: ns, exited: make(chan struct{})}
	pp := ""
	if proxyProtocol {
		pp = " proxy_protocol"
	}
	conf := filepath.Join(n.dir, "nginx.conf")
	if err := os.WriteFile(conf, fmt.Appendf(nil, nginxConf, n.dir, ap, pp), 0o644); err != nil {
		t.Fatal(err)
	}
	bin, _ := lookPath("nginx")
	// -e: the error log before the config is read (else /var/log/nginx).
	args := []string{"-p", n.dir, "-c", conf, "-e", filepath.Join(n.dir, "error.log")}
	if ns != nil {
		args = append([]string{"netns", "exec", ns.Name, bin}, args...)
		bin = "ip" // which execs nginx: the kill below reaches it
	}
	n.cmd = exec.Command(bin, args...)
	n.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	var out strings.Builder
	n.cmd.Stdout, n.cmd.Stderr = &out, &out
	if err := n.cmd.Start(); err != nil {
		t.Fatalf("nginx: %v", err)
	}
	go func() { _ = n.cmd.Wait(); close(n.exited) }()
	t.Cleanup(n.kill)
	n.waitListening(t, &out)
	return n
}

// waitListening waits until a connect to the server succeeds.
func (n *Nginx) waitListening(t testing.TB, out *strings.Builder) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-n.exited:
			t.Fatalf("nginx exited: %s %s", out.String(), n.ErrorLog())
		default:
		}
		dial := func() error {
			c, err := net.DialTimeout("tcp", n.Addr.String(), time.Second)
			if err == nil {
				c.Close()
			}
			return err
		}
		var err error
		if n.ns != nil {
			err = n.ns.Do(dial)
		} else {
			err = dial()
		}
		if err == nil {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("nginx on %s not listening: %s %s", n.Addr, out.String(), n.ErrorLog())
}

// ErrorLog returns nginx's error log so far.
func (n *Nginx) ErrorLog() string { return n.read("error.log") }

// AccessLog returns nginx's access log so far: one line per request,
// "CLIENT proxy=ADDR:PORT status=CODE".
func (n *Nginx) AccessLog() string { return n.read("access.log") }

func (n *Nginx) read(name string) string {
	b, _ := os.ReadFile(filepath.Join(n.dir, name))
	return string(b)
}

func (n *Nginx) kill() {
	_ = n.cmd.Process.Kill()
	<-n.exited
}
