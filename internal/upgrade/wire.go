// The upgrade's wire: a SOCK_SEQPACKET socketpair between the running
// l4lb and the new one it started, carrying one JSON message per packet
// with descriptors attached (SCM_RIGHTS).

package upgrade

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"time"

	"golang.org/x/sys/unix"

	"github.com/l4lb/l4lb/l4"
	"github.com/l4lb/l4lb/l4/proxy"
	"github.com/l4lb/l4lb/l4/reconcile"
)

// upgradeFDEnv names the descriptor of the new process's end of the
// socketpair; its presence is what makes `l4lb run` take over.
const upgradeFDEnv = "L4LB_UPGRADE_FD"

// maxFDsPerMsg stays under the kernel's SCM_MAX_FD (253).
const maxFDsPerMsg = 240

// maxMsg bounds one message. A seqpacket message must fit the send
// buffer, which SO_SNDBUF sizes only up to net.core.wmem_max (208 KiB by
// default); batches stay well under it (120 connections are about 50 KiB).
const maxMsg = 160 << 10

// backendsPerMsg bounds the backend states in one message.
const backendsPerMsg = 400

// Message kinds, in protocol order (docs/design.md, "Upgrade").
const (
	opHello     = "hello"     // new -> old: config loaded, send the sockets
	opListeners = "listeners" // old -> new: VIP sockets, admin and metrics sockets
	opBackends  = "backends"  // old -> new: backends' health and overrides
	opReady     = "ready"     // new -> old: every VIP serves
	opFailed    = "failed"    // new -> old: it gives up (why); it exits
	opSessions  = "sessions"  // old -> new: UDP sessions, with their sockets
	opConns     = "conns"     // old -> new: TCP connections, with both sockets
	opTaken     = "taken"     // new -> old: which of the last batch it adopted
	opDone      = "done"      // old -> new: you are the main process; new -> old: serving the admin socket
	// After done, until the old process exits (it drains what it kept):
	opStop   = "stop"   // old -> new: the old one got a SIGTERM/SIGINT; stop the service
	opReload = "reload" // old -> new: the old one got a SIGHUP; reload
)

// handoffMsg is one message; which fields are set depends on Op.
type handoffMsg struct {
	Op       string   `json:"op"`
	PID      int      `json:"pid,omitempty"`
	Error    string   `json:"error,omitempty"`
	Problems []string `json:"problems,omitempty"`

	// listeners: descriptors in order: TCP listeners, UDP groups, then the
	// admin socket and the metrics listener when present.
	TCP     []string       `json:"tcp,omitempty"`
	UDP     []udpGroupWire `json:"udp,omitempty"`
	Admin   string         `json:"admin,omitempty"`   // its path
	Metrics string         `json:"metrics,omitempty"` // its address
	Last    bool           `json:"last,omitempty"`    // the last message of its kind

	Backends []reconcile.BackendState `json:"backends,omitempty"`
	// Changes (the first backends message): the run-time backend changes
	// (`l4lb backend`), which the new process lays over its file.
	Changes []l4.BackendChange `json:"backend_changes,omitempty"`

	Conns    []proxy.ConnState    `json:"conns,omitempty"`    // descriptors each as its FDCount says: client, backend, pipes
	Sessions []proxy.SessionState `json:"sessions,omitempty"` // one descriptor each: the backend socket
	Taken    []bool               `json:"taken,omitempty"`
	Kept     int                  `json:"kept,omitempty"`
	// AdminTaken (done, new -> old): the new process serves the admin
	// socket passed; the old one must leave the file in place.
	AdminTaken bool `json:"admin_taken,omitempty"`
	// Signal (stop, reload): the signal the old process got, by name.
	Signal string `json:"signal,omitempty"`
	// Pipes (hello, new -> old): this l4lb adopts connections with their
	// bytes in flight in their pipes (proxy.ConnState.FDCount); without it
	// the old process flushes them first.
	Pipes bool `json:"pipes,omitempty"`
}

// udpGroupWire is a UDP VIP's socket group in a listeners message.
type udpGroupWire struct {
	Key string `json:"key"`
	N   int    `json:"n"`
}

// handoffConn is one end of the socketpair.
type handoffConn struct {
	c        *net.UnixConn
	buf, oob []byte // recv's, reused
}

// newHandoffConn wraps fd (consumed) as one end of the socketpair.
func newHandoffConn(fd int) (*handoffConn, error) {
	for _, opt := range [][2]int{{unix.SO_SNDBUFFORCE, unix.SO_SNDBUF}, {unix.SO_RCVBUFFORCE, unix.SO_RCVBUF}} {
		if unix.SetsockoptInt(fd, unix.SOL_SOCKET, opt[0], 4*maxMsg) != nil { // root: past wmem_max
			_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, opt[1], 4*maxMsg)
		}
	}
	f := os.NewFile(uintptr(fd), "upgrade")
	c, err := net.FileConn(f)
	f.Close()
	if err != nil {
		return nil, fmt.Errorf("upgrade socket: %w", err)
	}
	uc, ok := c.(*net.UnixConn)
	if !ok {
		c.Close()
		return nil, errors.New("upgrade socket: not a Unix socket")
	}
	return &handoffConn{c: uc, buf: make([]byte, maxMsg+1), oob: make([]byte, unix.CmsgSpace(4*maxFDsPerMsg))}, nil
}

func (h *handoffConn) Close() error { return h.c.Close() }

// send writes m with fds attached. The kernel takes its own references:
// the caller may close fds afterwards.
func (h *handoffConn) send(m *handoffMsg, fds []int) error {
	data, err := json.Marshal(m)
	if err != nil {
		return err
	}
	if len(data) > maxMsg {
		return fmt.Errorf("upgrade: %s message of %d bytes is too large", m.Op, len(data))
	}
	if len(fds) > maxFDsPerMsg {
		return fmt.Errorf("upgrade: %d descriptors in one message", len(fds))
	}
	var oob []byte
	if len(fds) > 0 {
		oob = unix.UnixRights(fds...)
	}
	_ = h.c.SetWriteDeadline(time.Now().Add(10 * time.Second))
	if _, _, err := h.c.WriteMsgUnix(data, oob, nil); err != nil {
		return fmt.Errorf("upgrade: sending %s: %w", m.Op, err)
	}
	return nil
}

// recv reads one message and the descriptors attached to it (close-on-exec,
// owned by the caller), waiting until deadline. A closed peer is io.EOF.
func (h *handoffConn) recv(deadline time.Time) (*handoffMsg, []int, error) {
	buf, oob := h.buf, h.oob
	_ = h.c.SetReadDeadline(deadline)
	n, oobn, flags, _, err := h.c.ReadMsgUnix(buf, oob)
	if err != nil {
		return nil, nil, err
	}
	fds, ferr := parseRights(oob[:oobn])
	switch {
	case ferr != nil:
	case flags&(unix.MSG_TRUNC|unix.MSG_CTRUNC) != 0:
		ferr = errors.New("upgrade: message truncated")
	case n == 0 && oobn == 0:
		ferr = io.EOF
	}
	var m handoffMsg
	if ferr == nil {
		if err := json.Unmarshal(buf[:n], &m); err != nil {
			ferr = fmt.Errorf("upgrade: bad message: %w", err)
		}
	}
	if ferr != nil {
		closeFDs(fds)
		return nil, nil, ferr
	}
	return &m, fds, nil
}

// parseRights returns the descriptors of SCM_RIGHTS messages in oob.
func parseRights(oob []byte) ([]int, error) {
	if len(oob) == 0 {
		return nil, nil
	}
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil, fmt.Errorf("upgrade: control message: %w", err)
	}
	var fds []int
	for i := range msgs {
		got, err := unix.ParseUnixRights(&msgs[i])
		if err != nil {
			closeFDs(fds)
			return nil, fmt.Errorf("upgrade: control message: %w", err)
		}
		fds = append(fds, got...)
	}
	return fds, nil
}

func closeFDs(fds []int) {
	for _, fd := range fds {
		unix.Close(fd)
	}
}
