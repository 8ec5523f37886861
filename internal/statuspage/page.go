// The handlers: the page, its script and style, and the status JSON.

package statuspage

import (
	"embed"
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/l4lb/l4lb/l4/plane"
)

//go:embed assets
var assets embed.FS

// csp allows the page its own script, style and status JSON and nothing
// else: no inline script (a name that smuggled markup in could not run),
// no other origin, no form, no framing.
const csp = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// JSONPath is where the page reads the status from.
const JSONPath = "/status.json"

// Register adds the page (at / and /status), its script and style, and
// the status JSON (read from status at each request) to mux, for GET and
// HEAD alone.
func Register(mux *http.ServeMux, status func() plane.Status) error {
	files := []struct{ name, ctype string }{
		{"index.html", "text/html; charset=utf-8"},
		{"status.js", "text/javascript; charset=utf-8"},
		{"status.css", "text/css; charset=utf-8"},
	}
	h := map[string]http.Handler{}
	for _, f := range files {
		data, err := assets.ReadFile("assets/" + f.name)
		if err != nil {
			return fmt.Errorf("status page: %w", err)
		}
		h[f.name] = asset(data, f.ctype)
	}
	mux.Handle("GET /{$}", h["index.html"])
	mux.Handle("GET /status", h["index.html"])
	mux.Handle("GET /status.js", h["status.js"])
	mux.Handle("GET /status.css", h["status.css"])
	mux.Handle("GET "+JSONPath, statusJSON(status))
	return nil
}

// asset serves one embedded file with its type.
func asset(data []byte, ctype string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		headers(w, ctype)
		_, _ = w.Write(data)
	})
}

// statusJSON answers the status as `l4lb status --json` prints it.
func statusJSON(status func() plane.Status) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		data, err := json.Marshal(status())
		if err != nil {
			http.Error(w, "status: "+err.Error(), http.StatusInternalServerError)
			return
		}
		headers(w, "application/json")
		_, _ = w.Write(data)
	})
}

// headers sets what every answer carries: its type, the policy, and no
// caching (the page and its data are of one binary and one moment).
func headers(w http.ResponseWriter, ctype string) {
	h := w.Header()
	h.Set("Content-Type", ctype)
	h.Set("Content-Security-Policy", csp)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cache-Control", "no-store")
}
