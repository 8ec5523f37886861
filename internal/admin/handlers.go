package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"time"
	"unicode"

	"go.uber.org/zap"

	"github.com/l4lb/l4lb/l4"
	"github.com/l4lb/l4lb/l4/plane"
	"github.com/l4lb/l4lb/l4/reconcile"
)

type handlers struct {
	d   Daemon
	log *zap.Logger
}

func (h *handlers) status(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, h.d.Status())
}

func (h *handlers) config(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/toml")
	_, _ = w.Write(h.d.ConfigTOML())
}

func (h *handlers) reload(w http.ResponseWriter, r *http.Request) {
	if !emptyBody(w, r) {
		return
	}
	res, err := h.d.Reload(r.Context())
	writeResult(w, res, res.OK, err)
}

// writeResult answers a reload or upgrade: 503 with err if it could not
// be tried, 422 with res if it was tried and failed (ok false), else 200
// with res.
func writeResult(w http.ResponseWriter, res any, ok bool, err error) {
	switch {
	case err != nil:
		writeError(w, http.StatusServiceUnavailable, err)
	case !ok:
		writeJSON(w, http.StatusUnprocessableEntity, res)
	default:
		writeJSON(w, http.StatusOK, res)
	}
}

// Upgrader is a Daemon that can hand over to a new binary (POST /upgrade).
type Upgrader interface {
	// Upgrade starts the new binary and hands over to it; an error means
	// no upgrade was tried (shutting down).
	Upgrade(ctx context.Context, req UpgradeRequest) (UpgradeResult, error)
}

func (h *handlers) upgrade(w http.ResponseWriter, r *http.Request) {
	var req UpgradeRequest
	if !readJSON(w, r, &req) {
		return
	}
	if req.Binary != "" && !filepath.IsAbs(req.Binary) {
		writeError(w, http.StatusBadRequest, fmt.Errorf("binary %q: want an absolute path", req.Binary))
		return
	}
	if req.Timeout != "" {
		if d, err := time.ParseDuration(req.Timeout); err != nil || d <= 0 || d > time.Hour {
			writeError(w, http.StatusBadRequest, fmt.Errorf("timeout %q: want a duration up to 1h, such as 2m", req.Timeout))
			return
		}
	}
	u, ok := h.d.(Upgrader)
	if !ok {
		writeError(w, http.StatusNotImplemented, errors.New("this l4lb cannot upgrade in place"))
		return
	}
	res, err := u.Upgrade(r.Context(), req)
	writeResult(w, res, res.OK, err)
}

// override sets o on the backend the path names.
func (h *handlers) override(o l4.Override) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var req OverrideRequest
		if !readJSON(w, r, &req) {
			return
		}
		if err := printable("reason", req.Reason, 200); err != nil {
			writeError(w, http.StatusBadRequest, err)
			return
		}
		by, ok := operator(w, r, req.Operator)
		if !ok {
			return
		}
		if req.Reason != "" {
			by += ": " + req.Reason
		}
		res, err := h.d.SetOverride(r.PathValue("vip"), r.PathValue("backend"), o, by, req.Force)
		writeAnswer(w, res, err)
	}
}

// explain answers which backend ?client=IP[:PORT] has or would get on
// the VIP the path names.
func (h *handlers) explain(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	for k := range q {
		if k != "client" {
			writeError(w, http.StatusBadRequest, fmt.Errorf("unknown parameter %q (explain takes client=IP[:PORT])", k))
			return
		}
	}
	if len(q["client"]) != 1 {
		writeError(w, http.StatusBadRequest, errors.New("want one client=IP[:PORT] parameter"))
		return
	}
	client, err := plane.ParseClient(q.Get("client"))
	if err != nil {
		writeError(w, http.StatusBadRequest, err)
		return
	}
	res, err := h.d.Explain(r.PathValue("vip"), client)
	writeAnswer(w, res, err)
}

// operator names who asks: the user behind the request's peer, and the
// operator the client named. It answers 400 and returns false if the
// operator's name is not printable text of at most 64 bytes.
func operator(w http.ResponseWriter, r *http.Request, named string) (string, bool) {
	if err := printable("operator", named, 64); err != nil {
		writeError(w, http.StatusBadRequest, err)
		return "", false
	}
	p, _ := r.Context().Value(peerKey{}).(peer)
	return whoIs(p.uid, named), true
}

// whoIs names the user behind uid, and the operator the client named.
func whoIs(uid int, operator string) string {
	name := "uid " + strconv.Itoa(uid)
	if u, err := user.LookupId(strconv.Itoa(uid)); err == nil {
		name = u.Username
	}
	if operator != "" && operator != name {
		name += " (operator " + operator + ")"
	}
	return name
}

// printable refuses control characters and overlong text: what an
// operator writes ends up in status and logs.
func printable(field, s string, limit int) error {
	if len(s) > limit {
		return fmt.Errorf("%s: longer than %d bytes", field, limit)
	}
	if i := strings.IndexFunc(s, func(r rune) bool { return !unicode.IsPrint(r) }); i >= 0 {
		return fmt.Errorf("%s: control character at byte %d", field, i)
	}
	return nil
}

// readJSON decodes an optional JSON body into v; it answers 400 or 413
// and returns false when it cannot.
func readJSON(w http.ResponseWriter, r *http.Request, v any) bool {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	var tooBig *http.MaxBytesError
	switch {
	case errors.As(err, &tooBig):
		writeError(w, http.StatusRequestEntityTooLarge, fmt.Errorf("request body over %d bytes", maxBody))
		return false
	case err != nil:
		writeError(w, http.StatusBadRequest, fmt.Errorf("reading the request: %w", err))
		return false
	case len(strings.TrimSpace(string(body))) == 0:
		return true
	}
	dec := json.NewDecoder(strings.NewReader(string(body)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		writeError(w, http.StatusBadRequest, fmt.Errorf("request body: %w", err))
		return false
	}
	if dec.More() {
		writeError(w, http.StatusBadRequest, errors.New("request body: more than one JSON value"))
		return false
	}
	return true
}

// emptyBody refuses a body where the endpoint takes none.
func emptyBody(w http.ResponseWriter, r *http.Request) bool {
	var v struct{}
	return readJSON(w, r, &v)
}

// rebalance starts a rebalance of the VIP the path names.
func (h *handlers) rebalance(w http.ResponseWriter, r *http.Request) {
	var req RebalanceRequest
	if !readJSON(w, r, &req) {
		return
	}
	if err := reconcile.CheckRebalanceRate(req.Rate); err != nil {
		writeError(w, http.StatusBadRequest, err)
		return
	}
	by, ok := operator(w, r, req.Operator)
	if !ok {
		return
	}
	st, err := h.d.Rebalance(r.PathValue("vip"), reconcile.RebalanceOptions{Rate: req.Rate, Reset: req.Reset, By: by})
	writeAnswer(w, st, err)
}

func (h *handlers) rebalanceStatus(w http.ResponseWriter, r *http.Request) {
	st, err := h.d.RebalanceStatus(r.PathValue("vip"))
	writeAnswer(w, st, err)
}

func (h *handlers) stopRebalance(w http.ResponseWriter, r *http.Request) {
	if !emptyBody(w, r) {
		return
	}
	by, _ := operator(w, r, "")
	st, err := h.d.StopRebalance(r.PathValue("vip"), by)
	writeAnswer(w, st, err)
}

// Capturer is a Daemon that can sample an xdp VIP's packets (POST
// /vips/{vip}/capture).
type Capturer interface {
	Capture(ctx context.Context, vip string, req plane.CaptureRequest, emit func(plane.CapturedPacket) error) (plane.CaptureEnd, error)
}

// capture streams a capture as JSON lines: each packet as it is sampled,
// then its end. The status (and an error's answer) waits for the first
// packet, so that a capture that cannot start gets 404, 409 or 400.
func (h *handlers) capture(w http.ResponseWriter, r *http.Request) {
	var req plane.CaptureRequest
	if !readJSON(w, r, &req) {
		return
	}
	if err := plane.CheckCapture(req); err != nil {
		writeError(w, http.StatusBadRequest, err)
		return
	}
	c, ok := h.d.(Capturer)
	if !ok {
		writeError(w, http.StatusNotImplemented, errors.New("this l4lb cannot capture"))
		return
	}
	s := &captureStream{w: w, enc: json.NewEncoder(w), rc: http.NewResponseController(w)}
	end, err := c.Capture(r.Context(), r.PathValue("vip"), req, s.packet)
	if !s.started {
		if err != nil {
			writeError(w, errStatus(err), err)
			return
		}
		s.start()
	}
	if err != nil {
		end.Error = err.Error()
	}
	_ = s.enc.Encode(plane.CaptureLine{End: &end})
}

// captureStream writes a capture's lines, each flushed.
type captureStream struct {
	w       http.ResponseWriter
	enc     *json.Encoder
	rc      *http.ResponseController
	started bool
}

func (s *captureStream) start() {
	s.w.Header().Set("Content-Type", "application/x-ndjson")
	s.w.WriteHeader(http.StatusOK)
	s.started = true
}

func (s *captureStream) packet(p plane.CapturedPacket) error {
	if !s.started {
		s.start()
	}
	if err := s.enc.Encode(plane.CaptureLine{Packet: &p}); err != nil {
		return err
	}
	return s.rc.Flush()
}

// errStatus is the HTTP status of an error the daemon returned, one
// table for every route: 404 no such VIP or backend, 409 refused in the
// state things are in, 422 a change the config's checks refuse, 400 a
// request that names nothing usable, 500 anything else.
func errStatus(err error) int {
	switch {
	case errors.Is(err, reconcile.ErrNoVIP), errors.Is(err, reconcile.ErrNoBackend):
		return http.StatusNotFound
	case errors.Is(err, reconcile.ErrRefused), errors.Is(err, reconcile.ErrExists),
		errors.Is(err, reconcile.ErrRebalanceRunning), errors.Is(err, plane.ErrCannotRebalance),
		errors.Is(err, plane.ErrCannotCapture):
		return http.StatusConflict
	case errors.Is(err, reconcile.ErrInvalid):
		return http.StatusUnprocessableEntity
	case errors.Is(err, reconcile.ErrAmbiguous), errors.Is(err, plane.ErrBadClient), errors.Is(err, plane.ErrBadCapture):
		return http.StatusBadRequest
	}
	return http.StatusInternalServerError
}

// writeAnswer answers with res as JSON, or with err under its status.
func writeAnswer(w http.ResponseWriter, res any, err error) {
	if err != nil {
		writeError(w, errStatus(err), err)
		return
	}
	writeJSON(w, http.StatusOK, res)
}
