package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"net"
	"net/http"
	"net/http/pprof"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/l4lb/l4lb/l4"
	"github.com/l4lb/l4lb/l4/plane"
	"github.com/l4lb/l4lb/l4/reconcile"
)

// Daemon is what the API serves: the running l4lb.
type Daemon interface {
	// Status reports every VIP and backend, and the process.
	Status() plane.Status
	// ConfigTOML is the config in force, resolved, as TOML.
	ConfigTOML() []byte
	// Reload applies the config file again, serialized with SIGHUP
	// reloads. An error means no reload was tried (shutting down).
	Reload(ctx context.Context) (ReloadResult, error)
	// SetOverride sets an operator's state for one backend of one VIP;
	// a drain or disable the capacity guard refuses is an error wrapping
	// reconcile.ErrRefused unless force.
	SetOverride(vip, backend string, o l4.Override, by string, force bool) (plane.OverrideResult, error)
	// Explain says which backend client's flow on vip has or would get,
	// and why; client's port is 0 when none was given. It changes nothing.
	Explain(vip string, client netip.AddrPort) (plane.Explanation, error)
	// Rebalance starts a rebalance of one VIP and returns its plan; it
	// runs in the background.
	Rebalance(vip string, o reconcile.RebalanceOptions) (plane.RebalanceStatus, error)
	// RebalanceStatus reports a VIP's running or last rebalance.
	RebalanceStatus(vip string) (plane.RebalanceStatus, error)
	// StopRebalance stops a VIP's running rebalance, if any.
	StopRebalance(vip, by string) (plane.RebalanceStatus, error)
}

// Server serves the admin API on a Unix socket.
type Server struct {
	path  string
	ident os.FileInfo // the socket file as created: only it is removed at exit
	srv   *http.Server
	ln    *net.UnixListener
	// handedOver: the next l4lb serves the socket now (an upgrade); Close
	// neither removes the file nor cuts requests in progress.
	handedOver atomic.Bool
}

// maxBody bounds a request body: every request this API takes is small.
const maxBody = 64 << 10

// Serve serves the admin API on the Unix socket at path (mode 0600). A
// stale socket there is replaced; a live one means another l4lb runs;
// anything that is not a socket is refused and left alone.
func Serve(path string, d Daemon, log *zap.Logger) (*Server, error) {
	ln, err := Listen(path)
	if err != nil {
		return nil, err
	}
	return ServeListener(ln, path, d, log)
}

// Listen binds the admin socket at path (root only), replacing a stale
// socket nobody answers on; another l4lb serving it is an error. Closing
// the listener before ServeListener serves it removes the file.
func Listen(path string) (*net.UnixListener, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("admin socket: %w", err)
	}
	if err := clearStaleSocket(path); err != nil {
		return nil, err
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("admin socket: %w", err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		return nil, fmt.Errorf("admin socket: %w", err)
	}
	return ln, nil
}

// ServeListener serves the admin API on ln, a socket bound at path
// (created by Serve, or by an earlier l4lb that handed it over).
func ServeListener(ln *net.UnixListener, path string, d Daemon, log *zap.Logger) (*Server, error) {
	// Close must not unlink whatever is at path by then: removal is ours.
	ln.SetUnlinkOnClose(false)
	ident, err := os.Lstat(path)
	if err != nil {
		ln.Close()
		return nil, fmt.Errorf("admin socket: %w", err)
	}
	s := &Server{path: path, ident: ident, ln: ln, srv: &http.Server{
		Handler:           onlyPrivileged(routes(d, log)),
		ReadHeaderTimeout: 5 * time.Second,
		ConnContext:       withPeer,
	}}
	go func() {
		err := s.srv.Serve(ln)
		if err != nil && !errors.Is(err, http.ErrServerClosed) && !s.handedOver.Load() {
			log.Error("admin server stopped", zap.Error(err))
		}
	}()
	return s, nil
}

// Path returns the socket's path.
func (s *Server) Path() string { return s.path }

// ListenerFile returns a duplicate of the listening socket, for the next
// l4lb; the caller closes it.
func (s *Server) ListenerFile() (*os.File, error) { return s.ln.File() }

// Handover stops accepting on the socket, which the next l4lb now serves:
// requests in progress (the upgrade's own) finish, and Close leaves the
// socket file in place.
func (s *Server) Handover() {
	s.handedOver.Store(true)
	_ = s.ln.Close()
}

// Close stops serving and removes the socket file, if it is still the
// one Serve created.
func (s *Server) Close() {
	if s.handedOver.Load() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = s.srv.Shutdown(ctx) // the upgrade's answer is still being written
		return
	}
	_ = s.srv.Close()
	if fi, err := os.Lstat(s.path); err == nil && os.SameFile(fi, s.ident) {
		_ = os.Remove(s.path)
	}
}

// clearStaleSocket removes a socket at path that nobody answers on. It
// refuses a live socket and anything that is not a socket.
func clearStaleSocket(path string) error {
	fi, err := os.Lstat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		return fmt.Errorf("admin socket: %w", err)
	case fi.Mode().Type() != fs.ModeSocket:
		return fmt.Errorf("admin socket %s: exists and is not a socket; l4lb removes only sockets, choose another admin_socket", path)
	}
	if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
		c.Close()
		return fmt.Errorf("admin socket %s: another l4lb is serving it (stop that one, upgrade it with `l4lb upgrade`, or give this one another admin_socket)", path)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("admin socket: removing the stale socket: %w", err)
	}
	return nil
}

type peerKey struct{}

// peer is the client process at the other end of an admin connection, as
// the kernel reports it (SO_PEERCRED): it cannot be forged.
type peer struct {
	uid, pid int
	known    bool
}

// withPeer records the connecting process's credentials.
func withPeer(ctx context.Context, c net.Conn) context.Context {
	var p peer
	if uc, ok := c.(*net.UnixConn); ok {
		if raw, err := uc.SyscallConn(); err == nil {
			_ = raw.Control(func(fd uintptr) {
				if cred, err := unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED); err == nil {
					p = peer{uid: int(cred.Uid), pid: int(cred.Pid), known: true}
				}
			})
		}
	}
	return context.WithValue(ctx, peerKey{}, p)
}

// onlyPrivileged refuses clients other than root and the daemon's own
// user. The socket's mode (0600) already keeps others out; this holds
// even if someone loosens the mode or the directory.
func onlyPrivileged(next http.Handler) http.Handler {
	self := os.Geteuid()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p, _ := r.Context().Value(peerKey{}).(peer)
		if !p.known || (p.uid != 0 && p.uid != self) {
			writeError(w, http.StatusForbidden, fmt.Errorf("the admin API is for root only (you are uid %d)", p.uid))
			return
		}
		next.ServeHTTP(w, r)
	})
}

// writeJSON answers with v as JSON.
func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

// writeError answers with {"error": err} and status.
func writeError(w http.ResponseWriter, status int, err error) {
	writeJSON(w, status, ErrorBody{Error: err.Error()})
}

// route is one endpoint: what the README and GET / list.
type route struct {
	Method  string `json:"method"`
	Path    string `json:"path"`
	Summary string `json:"summary"`
	handler http.HandlerFunc
}

// routes builds the API. Paths are registered without a method so that a
// known path with the wrong method gets 405 and an unknown one 404, both
// as JSON.
func routes(d Daemon, log *zap.Logger) http.Handler {
	h := &handlers{d: d, log: log}
	table := []route{
		{"GET", "/", "this list of endpoints", nil},
		{"GET", "/status", "VIPs, backends (health, overrides, flows), event loops, process", h.status},
		{"GET", "/config", "the config in force, resolved, as TOML", h.config},
		{"POST", "/reload", "apply the config file again (as SIGHUP); 422 with the problems when refused", h.reload},
		{"POST", "/upgrade", "start a new l4lb binary that takes over sockets and connections (as SIGUSR2); 422 when it fails and this one keeps serving", h.upgrade},
		{"POST", "/vips/{vip}/backends/{backend}/drain", "no new flows to the backend; established ones continue; 409 when the backends left cannot take its live flows or none is left ({\"force\": true} sets it anyway)", h.override(l4.OverrideDrain)},
		{"POST", "/vips/{vip}/backends/{backend}/disable", "no new flows, and established ones are reset; 409 as drain", h.override(l4.OverrideDisable)},
		{"POST", "/vips/{vip}/backends/{backend}/enable", "clear a drain or disable", h.override(l4.OverrideNone)},
		{"POST", "/vips/{vip}/backends", "add a backend at run time ({\"address\": \"IP:PORT\", \"name\", \"weight\", \"max_conns\", \"backup\"}), checked as the file's; 422 with the file's words when refused", h.backendAdd},
		{"POST", "/vips/{vip}/backends/{backend}/set", "set a backend's weight or max_conns at run time ({\"weight\": N, \"max_conns\": N}), or {\"reset\": true}: the file's again; 422 when refused", h.backendSet},
		{"POST", "/vips/{vip}/backends/{backend}/remove", "drain a backend, then remove it when its flows end or at {\"timeout\": \"30s\"}; 409 as drain ({\"force\": true})", h.backendRemove},
		{"GET", "/vips/{vip}/explain", "which backend a client's flow has or would get, and why (?client=IP[:PORT]); changes nothing", h.explain},
		{"POST", "/vips/{vip}/rebalance", "close connections of the backends above their share (FIN both ways) at the VIP's rebalance_rate, or {\"rate\": N} a second, until each is within 10%; answers the plan at once", h.rebalance},
		{"GET", "/vips/{vip}/rebalance", "the running or last rebalance: state, closed, per backend live, target and to close", h.rebalanceStatus},
		{"DELETE", "/vips/{vip}/rebalance", "stop a running rebalance", h.stopRebalance},
		{"POST", "/vips/{vip}/capture", "sample an xdp VIP's packets ({\"count\": N, \"backend\": B, \"rate\": R, \"seconds\": S}): JSON lines, a packet each (frame as received, verdict, backend), then the end; stops when the client goes", h.capture},
		{"GET", "/debug/pprof/", "Go profiles of the running process", pprof.Index},
	}
	mux := http.NewServeMux()
	byPath := map[string]map[string]http.HandlerFunc{}
	var paths []string
	for _, rt := range table[1:] {
		if byPath[rt.Path] == nil {
			byPath[rt.Path] = map[string]http.HandlerFunc{}
			paths = append(paths, rt.Path)
		}
		byPath[rt.Path][rt.Method] = rt.handler
	}
	for _, p := range paths {
		mux.HandleFunc(p, methods(byPath[p]))
	}
	mux.HandleFunc("/debug/pprof/profile", method("GET", pprof.Profile))
	mux.HandleFunc("/debug/pprof/trace", method("GET", pprof.Trace))
	mux.HandleFunc("/{$}", method("GET", func(w http.ResponseWriter, _ *http.Request) { writeJSON(w, http.StatusOK, table) }))
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, fmt.Errorf("no endpoint %s (GET / lists them)", r.URL.Path))
	})
	return mux
}

// method answers 405 to a request with another method than m.
func method(m string, h http.HandlerFunc) http.HandlerFunc {
	return methods(map[string]http.HandlerFunc{m: h})
}

// methods dispatches a path's requests by method (HEAD as GET); other
// methods get 405.
func methods(hs map[string]http.HandlerFunc) http.HandlerFunc {
	allowed := slices.Sorted(maps.Keys(hs))
	use := allowed[len(allowed)-1] // "use DELETE, GET or POST"
	if n := len(allowed); n > 1 {
		use = strings.Join(allowed[:n-1], ", ") + " or " + use
	}
	return func(w http.ResponseWriter, r *http.Request) {
		m := r.Method
		if m == "HEAD" && hs["HEAD"] == nil {
			m = "GET"
		}
		h := hs[m]
		if h == nil {
			w.Header().Set("Allow", strings.Join(allowed, ", "))
			writeError(w, http.StatusMethodNotAllowed, fmt.Errorf("%s %s: use %s", r.Method, r.URL.Path, use))
			return
		}
		h(w, r)
	}
}
