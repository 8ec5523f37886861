// The metrics listener: an HTTP server on metrics_listen with /metrics
// and the status page.

package metrics

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/zap"

	"github.com/l4lb/l4lb/internal/statuspage"
	"github.com/l4lb/l4lb/l4/plane"
)

// Serve serves /metrics on addr (on ln when an earlier l4lb passed its
// listener) with l4lb's metrics, read from status at each scrape, and the
// Go runtime's and the process's; and the live status page (/ and
// /status, with its status.json: internal/statuspage).
func Serve(addr string, ln net.Listener, status func() plane.Status, log *zap.Logger) (*http.Server, *net.TCPListener, error) {
	mux := http.NewServeMux()
	if err := statuspage.Register(mux, status); err != nil {
		return nil, nil, err
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(newStatusCollector(status), collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if ln == nil {
		var err error
		if ln, err = net.Listen("tcp", addr); err != nil {
			return nil, nil, err
		}
	}
	tl, ok := ln.(*net.TCPListener)
	if !ok {
		ln.Close()
		return nil, nil, fmt.Errorf("metrics listener %s: not TCP", addr)
	}
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("metrics server stopped", zap.Error(err))
		}
	}()
	return srv, tl, nil
}
