// `l4lb xdp capture` end to end: the daemon samples an xdp VIP's packets
// while clients use it, tshark reads the file, and a killed client's
// capture is turned off.

package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/l4lb/l4lb/internal/testutil"
)

// startCapture starts `l4lb xdp capture` against lb; done closes when it
// exits.
func startCapture(t *testing.T, lb *lbProcess, args ...string) (cmd *exec.Cmd, out *syncBuffer, done chan struct{}) {
	t.Helper()
	cmd = exec.Command(mustBin(t), append([]string{"xdp", "capture", "--socket", lb.sock}, args...)...)
	out = &syncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done = make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-done
	})
	return cmd, out, done
}

// tsharkFields reads file with tshark, one line per packet, the fields
// joined by "|".
func tsharkFields(t *testing.T, file string, fields ...string) []string {
	t.Helper()
	args := []string{"-r", file, "-T", "fields", "-E", "separator=|"}
	for _, f := range fields {
		args = append(args, "-e", f)
	}
	var stderr bytes.Buffer
	cmd := exec.Command("tshark", args...)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("tshark -r %s: %v\n%s", file, err, stderr.Bytes())
	}
	return strings.Split(strings.TrimSpace(string(out)), "\n")
}

func TestXDPCapture(t *testing.T) {
	testutil.RequireTool(t, "tshark")
	n := newXDPNet(t, 2)
	lb := startLBIn(t, n.LB.NS, n.xdpConf(nil, "", 0, 1).String())
	lb.waitHealth(t, "web4", "be1", "up")
	lb.waitHealth(t, "web4", "be2", "up")
	be2 := n.Backends[1].Addr4.String() + ":80"

	// --backend be2 --count 6 while clients connect: every packet kept
	// went to be2, as received (to the VIP, not encapsulated).
	file := filepath.Join(t.TempDir(), "web4.pcapng")
	_, out, done := startCapture(t, lb, "--backend", "be2", "--count", "6", "--timeout", "60s", "--write", file, "web4")
	deadline := time.Now().Add(45 * time.Second)
	seen := map[string]int{}
	for waiting := true; waiting; {
		select {
		case <-done:
			waiting = false
		default:
			if time.Now().After(deadline) {
				t.Fatalf("the capture did not end; clients reached %v\n%s", seen, out)
			}
			seen[n.AskTCP(t, n.vip4)]++
		}
	}
	if !strings.Contains(out.String(), "wrote 6 packets of web4 to "+file) {
		t.Fatalf("capture said:\n%s", out)
	}
	if seen["be1"] == 0 {
		t.Errorf("clients reached %v: no packet for be1 to leave out", seen)
	}
	lines := tsharkFields(t, file, "ip.dst", "tcp.dstport", "ip.proto", "frame.comment")
	if len(lines) != 6 {
		t.Fatalf("tshark read %d packets, want 6:\n%s", len(lines), strings.Join(lines, "\n"))
	}
	for _, l := range lines {
		if want := n.vip4.Addr().String() + "|80|6|verdict XDP_TX (tx), backend be2 (" + be2 + ")"; l != want {
			t.Errorf("packet %q, want %q", l, want)
		}
	}

	// A capture whose client is killed is turned off: the next one is
	// not refused as busy, and ends by its own timeout. (The file grows
	// with each packet: a packet in it says the capture runs.)
	killed := filepath.Join(t.TempDir(), "killed.pcapng")
	cmd, out, done := startCapture(t, lb, "--count", "1000", "--write", killed, "dns4")
	header := int64(-1)
	var last string
	waitFor(t, 20*time.Second, "the capture of dns4 to write a packet", &last, func() bool {
		select {
		case <-done:
			t.Fatalf("the capture of dns4 ended: %s", out)
		default:
		}
		n.AskUDP(t, n.vip4)
		fi, err := os.Stat(killed)
		if err != nil || fi.Size() == 0 {
			return false
		}
		if header < 0 {
			header = fi.Size() // the section and interface blocks (or a packet more)
		}
		last = fmt.Sprintf("%d bytes", fi.Size())
		return fi.Size() > header
	})
	cmd.Process.Kill()
	<-done
	waitFor(t, 10*time.Second, "the killed client's capture to end", &last, func() bool {
		o, e, code := l4lbCmd(t, "xdp", "capture", "--socket", lb.sock, "--count", "1", "--timeout", "1s", "--write", filepath.Join(t.TempDir(), "y.pcapng"), "web6")
		last = o + e
		return code == 0
	})
	if !strings.Contains(last, "wrote 0 packets of web6") || !strings.Contains(last, "the timeout passed") {
		t.Errorf("after the kill: %s", last)
	}

	// Refusals: an unknown VIP, an unknown backend; no file is left.
	for args, want := range map[[2]string]string{{"nope", ""}: "no such VIP", {"web4", "be9"}: "no such backend"} {
		f := filepath.Join(t.TempDir(), "refused.pcapng")
		_, errOut, code := l4lbCmd(t, "xdp", "capture", "--socket", lb.sock, "--backend", args[1], "--write", f, args[0])
		if code != 1 || !strings.Contains(errOut, want) {
			t.Errorf("capture %v: exit %d, %q, want %q", args, code, errOut, want)
		}
		if _, err := os.Stat(f); err == nil {
			t.Errorf("capture %v left %s", args, f)
		}
	}
}

// waitFor polls cond until it holds or d passes; last is what cond saw.
func waitFor(t *testing.T, d time.Duration, what string, last *string, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(d); !cond(); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("waited %v for %s; last: %s", d, what, *last)
		}
	}
}
