// The admin API: JSON status on a root-only Unix socket.
package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"path/filepath"
	"time"

	"go.uber.org/zap"

	"github.com/l4lb/l4lb/config"
)

type adminServer struct {
	path  string
	ident os.FileInfo // the socket file as created: only it is removed at exit
	srv   *http.Server
}

// startAdmin serves the admin API on the Unix socket at path (mode 0600).
// A stale socket there is replaced; a live one means another l4lb runs;
// anything that is not a socket is refused and left alone.
func startAdmin(path string, d *daemon, log *zap.Logger) (*adminServer, error) {
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
	// Close must not unlink whatever is at path by then: removal is ours.
	ln.SetUnlinkOnClose(false)
	ident, err := os.Lstat(path)
	if err == nil {
		err = os.Chmod(path, 0o600)
	}
	if err != nil {
		ln.Close()
		return nil, fmt.Errorf("admin socket: %w", err)
	}
	a := &adminServer{path: path, ident: ident, srv: &http.Server{Handler: adminMux(d), ReadHeaderTimeout: 5 * time.Second}}
	go func() {
		if err := a.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("admin server stopped", zap.Error(err))
		}
	}()
	return a, nil
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
		return fmt.Errorf("admin socket %s: another l4lb is serving it", path)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("admin socket: removing the stale socket: %w", err)
	}
	return nil
}

// adminMux routes the admin API.
func adminMux(d *daemon) *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /status", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(d.status())
	})
	mux.HandleFunc("GET /config", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/toml")
		_, _ = w.Write(config.Format(d.rt.Config(), config.FormatOptions{}))
	})
	// Profiles for diagnosing a live process; the socket is root-only.
	mux.HandleFunc("GET /debug/pprof/", pprof.Index)
	mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
	return mux
}

// close stops serving and removes the socket file, if it is still the
// one l4lb created.
func (a *adminServer) close() {
	_ = a.srv.Close()
	if fi, err := os.Lstat(a.path); err == nil && os.SameFile(fi, a.ident) {
		_ = os.Remove(a.path)
	}
}
