// The handlers of the run-time backend verbs: add, set, remove.

package admin

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/l4lb/l4lb/l4"
	"github.com/l4lb/l4lb/l4/plane"
	"github.com/l4lb/l4lb/l4/reconcile"
)

// BackendChanger is a Daemon that changes backends at run time.
type BackendChanger interface {
	AddBackend(vip string, c l4.BackendChange, by string) (plane.BackendChangeResult, error)
	SetBackend(vip, backend string, s reconcile.BackendSet, by string) (plane.BackendChangeResult, error)
	RemoveBackend(ctx context.Context, vip, backend string, wait time.Duration, force bool, by string) (plane.BackendChangeResult, error)
}

// DefaultRemoveTimeout bounds the drain of a remove that names none.
const DefaultRemoveTimeout = 30 * time.Second

// maxRemoveTimeout bounds the drain a remove may ask for.
const maxRemoveTimeout = time.Hour

// changer returns the daemon's BackendChanger, or answers 501.
func (h *handlers) changer(w http.ResponseWriter) (BackendChanger, bool) {
	c, ok := h.d.(BackendChanger)
	if !ok {
		writeError(w, http.StatusNotImplemented, errors.New("this l4lb cannot change backends at run time"))
	}
	return c, ok
}

func (h *handlers) backendAdd(w http.ResponseWriter, r *http.Request) {
	var req BackendAddRequest
	if !readJSON(w, r, &req) {
		return
	}
	if req.Address == "" {
		writeError(w, http.StatusBadRequest, errors.New("address: required (ip:port)"))
		return
	}
	if err := printable("address", req.Address, 100); err != nil {
		writeError(w, http.StatusBadRequest, err)
		return
	}
	if err := printable("name", req.Name, 100); err != nil {
		writeError(w, http.StatusBadRequest, err)
		return
	}
	c, ok := h.changer(w)
	if !ok {
		return
	}
	by, ok := operator(w, r, req.Operator)
	if !ok {
		return
	}
	res, err := c.AddBackend(r.PathValue("vip"), l4.BackendChange{Address: req.Address, Name: req.Name, Weight: req.Weight, MaxConns: req.MaxConns, Backup: req.Backup}, by)
	writeAnswer(w, res, err)
}

func (h *handlers) backendSet(w http.ResponseWriter, r *http.Request) {
	var req BackendSetRequest
	if !readJSON(w, r, &req) {
		return
	}
	switch {
	case req.Reset && (req.Weight != nil || req.MaxConns != nil):
		writeError(w, http.StatusBadRequest, errors.New("reset goes alone: it gives the backend the file's weight and max_conns"))
		return
	case !req.Reset && req.Weight == nil && req.MaxConns == nil:
		writeError(w, http.StatusBadRequest, errors.New("nothing to set: give weight, max_conns, or reset"))
		return
	}
	c, ok := h.changer(w)
	if !ok {
		return
	}
	by, ok := operator(w, r, req.Operator)
	if !ok {
		return
	}
	res, err := c.SetBackend(r.PathValue("vip"), r.PathValue("backend"), reconcile.BackendSet{Weight: req.Weight, MaxConns: req.MaxConns, Reset: req.Reset}, by)
	writeAnswer(w, res, err)
}

func (h *handlers) backendRemove(w http.ResponseWriter, r *http.Request) {
	var req BackendRemoveRequest
	if !readJSON(w, r, &req) {
		return
	}
	wait := DefaultRemoveTimeout
	if req.Timeout != "" {
		d, err := time.ParseDuration(req.Timeout)
		if err != nil || d < 0 || d > maxRemoveTimeout {
			writeError(w, http.StatusBadRequest, fmt.Errorf("timeout %q: want a duration from 0s to 1h, such as 30s", req.Timeout))
			return
		}
		wait = d
	}
	c, ok := h.changer(w)
	if !ok {
		return
	}
	by, ok := operator(w, r, req.Operator)
	if !ok {
		return
	}
	res, err := c.RemoveBackend(r.Context(), r.PathValue("vip"), r.PathValue("backend"), wait, req.Force, by)
	writeAnswer(w, res, err)
}
