// `l4lb xdp capture VIP`: sample an xdp VIP's packets from the running
// l4lb into a pcapng file, each with its verdict and backend.

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/l4lb/l4lb/bpf"
	"github.com/l4lb/l4lb/internal/admin"
	"github.com/l4lb/l4lb/internal/pcapng"
	"github.com/l4lb/l4lb/l4/plane"
)

const xdpCaptureHelp = `"l4lb xdp capture VIP --write FILE" asks the running l4lb to sample the
packets its XDP program handles for an xdp VIP and writes them to FILE as
pcapng, which tshark and Wireshark read. Each packet is the frame as the
interface received it, before encapsulation, cut at 256 bytes (the
original length is kept), with a comment naming the verdict and the
backend: "verdict XDP_TX (tx), backend be1 (198.18.1.11:80)". tcpdump on
the interface cannot see these packets: XDP handles them before the
kernel's taps.

  --count N     stop after N packets (default 100)
  --backend B   keep only packets sent to backend B (a name or an address)
  --rate R      sample at most R packets a second (default 1000, at most
                100000); a busy VIP pays the copy for those alone. With
                --backend the rate applies first, so fewer are kept
  --timeout D   stop after D even with fewer packets (default 60s)

Ctrl-C stops it too; the file holds every packet received until then.
Sampling is off while no capture runs (the program tests one flag of the
VIP); the daemon turns it off when the capture ends or its client goes,
and the program stops by itself 5 s after a daemon that died. One capture
at a time. API: POST /vips/{vip}/capture, an answer of JSON lines.
`

// cmdXDPCapture runs `l4lb xdp capture`.
func cmdXDPCapture(args []string, stdout, stderr io.Writer) int {
	f := newFlags("xdp", stdout, stderr)
	socket := socketFlags(f)
	write := f.String("write", "", "the pcapng file to write (required)")
	count := f.Int("count", 100, "packets to capture")
	backend := f.String("backend", "", "keep only packets sent to this backend (name or address)")
	rate := f.Int("rate", 0, "packets a second sampled at most (0: 1000)")
	timeout := f.Duration("timeout", plane.DefaultCaptureSeconds*time.Second, "stop after this long")
	if code, ok := f.parse(args); !ok {
		return code
	}
	switch {
	case len(f.args) != 1:
		f.usageError("want one VIP name")
		return 2
	case *write == "":
		f.usageError("--write FILE is required")
		return 2
	}
	req := plane.CaptureRequest{Backend: *backend, Count: *count, Rate: *rate, Seconds: timeout.Seconds()}
	if err := plane.CheckCapture(req); err != nil {
		f.usageError(err.Error())
		return 2
	}
	path, ok := socket()
	if !ok {
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	end, err := captureTo(ctx, path, f.args[0], req, *write)
	if err != nil {
		fmt.Fprintln(stderr, "l4lb xdp capture:", err)
		return 1
	}
	fmt.Fprintf(stdout, "wrote %d packets of %s to %s (%s)", end.Captured, f.args[0], *write, captureWhy(end.Why))
	if end.Lost > 0 {
		fmt.Fprintf(stdout, "; %d samples lost: the ring was full", end.Lost)
	}
	fmt.Fprintln(stdout)
	return 0
}

// captureTo runs the capture into a new pcapng file at file. An
// interrupt (ctx) ends it as "stopped", with the packets so far.
func captureTo(ctx context.Context, sock, vip string, req plane.CaptureRequest, file string) (plane.CaptureEnd, error) {
	out, err := os.Create(file)
	if err != nil {
		return plane.CaptureEnd{}, err
	}
	w, err := pcapng.NewWriter(out, "l4lb xdp capture", "xdp "+vip, bpf.CaptureSnap)
	if err != nil {
		out.Close()
		return plane.CaptureEnd{}, err
	}
	n := 0
	end, err := admin.Client{Socket: sock}.Capture(ctx, vip, req, func(p plane.CapturedPacket) error {
		n++
		return w.WritePacket(p.Time, p.Data, p.Length, captureComment(p))
	})
	if ctx.Err() != nil { // interrupted: the daemon stops as the connection closes
		end, err = plane.CaptureEnd{Captured: n, Why: "stopped"}, nil
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	var se *admin.StatusError
	if errors.As(err, &se) {
		os.Remove(file) // refused before the first packet: nothing to keep
	}
	if err == nil && end.Error != "" {
		err = fmt.Errorf("after %d packets: %s", end.Captured, end.Error)
	}
	return end, err
}

// captureComment is the packet's pcapng comment.
func captureComment(p plane.CapturedPacket) string {
	be := "no backend"
	if p.Backend != "" {
		be = "backend " + p.Backend
	}
	return fmt.Sprintf("verdict %s (%s), %s", p.Verdict, p.Reason, be)
}

func captureWhy(why string) string {
	switch why {
	case "count":
		return "the count asked for"
	case "time":
		return "the timeout passed"
	}
	return "stopped"
}
