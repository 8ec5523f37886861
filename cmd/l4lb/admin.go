// The admin API: JSON status on a root-only Unix socket.
package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"path/filepath"
	"time"

	"go.uber.org/zap"

	"github.com/l4lb/l4lb/l4/reconcile"
)

type adminServer struct {
	path string
	srv  *http.Server
}

// startAdmin serves GET /status on the Unix socket at path (mode 0600).
// A stale socket file is replaced; a live one means another l4lb runs.
func startAdmin(path string, rt *reconcile.Runtime, log *zap.Logger) (*adminServer, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("admin socket: %w", err)
	}
	if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
		c.Close()
		return nil, fmt.Errorf("admin socket %s: another l4lb is serving it", path)
	}
	_ = os.Remove(path)
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("admin socket: %w", err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		return nil, fmt.Errorf("admin socket: %w", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /status", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(rt.Status())
	})
	// Profiles for diagnosing a live process; the socket is root-only.
	mux.HandleFunc("GET /debug/pprof/", pprof.Index)
	mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
	a := &adminServer{path: path, srv: &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}}
	go func() {
		if err := a.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("admin server stopped", zap.Error(err))
		}
	}()
	return a, nil
}

func (a *adminServer) close() {
	_ = a.srv.Close()
	_ = os.Remove(a.path)
}
