// The state file: its format, an atomic write, a checked read, and a
// writer that coalesces changes.

package statefile

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/l4lb/l4lb/l4"
	"github.com/l4lb/l4lb/l4/reconcile"
)

// Format names an l4lb state file; Schema is the layout this l4lb reads
// and writes.
const (
	Format = "l4lb-state"
	Schema = 1
)

// ErrRefused: a state file exists but is not used (corrupt, another
// host's, another schema's); the error says which.
var ErrRefused = errors.New("state file refused")

// State is what the file keeps.
type State struct {
	// Changes are the run-time backend changes, in order.
	Changes []l4.BackendChange `json:"backend_changes"`
	// Backends are each backend's health and override, as an upgrade
	// carries them.
	Backends []reconcile.BackendState `json:"backends"`
}

// file is the file's layout.
type file struct {
	Format string `json:"format"`
	Schema int    `json:"schema"`
	Host   string `json:"host"`
	// WrittenBy is the l4lb that wrote it (informational: an upgrade
	// reads what the old version wrote).
	WrittenBy string          `json:"written_by"`
	Written   time.Time       `json:"written"`
	State     json.RawMessage `json:"state"`
	SHA256    string          `json:"sha256"` // of State, compact JSON
}

// Write writes st to path atomically: a temporary file in its directory,
// synced, renamed over path, and the directory synced. host names this
// machine; by the l4lb writing.
func Write(path, host, by string, st *State) error {
	raw, err := json.Marshal(st)
	if err != nil {
		return fmt.Errorf("state file %s: %w", path, err)
	}
	sum := sha256.Sum256(raw)
	out, err := json.MarshalIndent(file{Format: Format, Schema: Schema, Host: host, WrittenBy: by, Written: time.Now().UTC(),
		State: raw, SHA256: hex.EncodeToString(sum[:])}, "", " ")
	if err != nil {
		return fmt.Errorf("state file %s: %w", path, err)
	}
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("state file %s: %w", path, err)
	}
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("state file %s: %w", path, err)
	}
	defer os.Remove(tmp.Name()) // gone after the rename; on failure, the leftover
	if _, err = tmp.Write(append(out, '\n')); err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		return fmt.Errorf("state file %s: %w", path, err)
	}
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		d.Close()
	}
	return nil
}

// Read reads the state file at path for host. No file is (nil, nil); a
// file that cannot be used is an error wrapping ErrRefused that says
// why; an error reading it is returned as it is.
func Read(path, host string) (*State, error) {
	data, err := os.ReadFile(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("state file %s: %w", path, err)
	}
	refuse := func(format string, args ...any) (*State, error) {
		return nil, fmt.Errorf("%w: %s: %s", ErrRefused, path, fmt.Sprintf(format, args...))
	}
	var f file
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&f); err != nil {
		return refuse("corrupt: not JSON (%v)", err)
	}
	switch {
	case f.Format != Format:
		return refuse("not an l4lb state file (format %q, want %q)", f.Format, Format)
	case f.Schema != Schema:
		return refuse("schema %d, written by %s; this l4lb reads schema %d", f.Schema, f.WrittenBy, Schema)
	case f.Host != host:
		return refuse("written on host %q, this is %q: another machine's backends and health do not apply here", f.Host, host)
	}
	var compact bytes.Buffer // as written: the file indents it
	if err := json.Compact(&compact, f.State); err != nil {
		return refuse("corrupt: state is not JSON (%v)", err)
	}
	sum := sha256.Sum256(compact.Bytes())
	if hex.EncodeToString(sum[:]) != f.SHA256 {
		return refuse("corrupt: its sha256 does not match its state")
	}
	var st State
	sdec := json.NewDecoder(bytes.NewReader(f.State))
	sdec.DisallowUnknownFields()
	if err := sdec.Decode(&st); err != nil {
		return refuse("corrupt: state does not decode (%v)", err)
	}
	return &st, nil
}

// Writer writes the state file whenever Poke says the state changed,
// coalescing pokes that come while it writes.
type Writer struct {
	path, host, by string
	snapshot       func() *State
	onErr          func(error) // told of each failed write in the background
	poke           chan struct{}
	done, stopped  chan struct{}

	mu      sync.Mutex // serialises writes and guards what follows
	written time.Time
	lastErr error
}

// NewWriter starts a writer of path; snapshot returns the state to write,
// onErr hears of a write that failed after a Poke. Close stops it.
func NewWriter(path, host, by string, snapshot func() *State, onErr func(error)) *Writer {
	w := &Writer{path: path, host: host, by: by, snapshot: snapshot, onErr: onErr, poke: make(chan struct{}, 1), done: make(chan struct{}), stopped: make(chan struct{})}
	go w.loop()
	return w
}

// Poke asks for a write soon; it never blocks.
func (w *Writer) Poke() {
	select {
	case w.poke <- struct{}{}:
	default:
	}
}

// Flush writes the state now and returns the write's error.
func (w *Writer) Flush() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	err := Write(w.path, w.host, w.by, w.snapshot())
	w.lastErr = err
	if err == nil {
		w.written = time.Now()
	}
	return err
}

// Last reports the last successful write's time and the last write's
// error.
func (w *Writer) Last() (time.Time, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.written, w.lastErr
}

func (w *Writer) loop() {
	defer close(w.stopped)
	for {
		select {
		case <-w.poke:
			if err := w.Flush(); err != nil && w.onErr != nil {
				w.onErr(err)
			}
		case <-w.done:
			return
		}
	}
}

// Close stops the writer after a last write.
func (w *Writer) Close() error {
	close(w.done)
	<-w.stopped
	return w.Flush()
}
