// The state file: what is written reads back; what is damaged or foreign
// is refused and says why.

package statefile_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/l4lb/l4lb/internal/statefile"
	"github.com/l4lb/l4lb/l4"
	"github.com/l4lb/l4lb/l4/reconcile"
)

func sample() *statefile.State {
	w := 7
	return &statefile.State{
		Changes:  []l4.BackendChange{{VIP: "pg", Backend: "db3", Added: true, Address: "198.18.1.13:5432", Weight: &w, By: "root", Since: time.Unix(1700000000, 0).UTC()}},
		Backends: []reconcile.BackendState{{VIP: "198.18.0.10:5432/tcp", Backend: "db1", Down: true, Override: "drain", By: "root"}},
	}
}

func TestWriteRead(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sub", "state.json")
	if st, err := statefile.Read(path, "h1"); st != nil || err != nil {
		t.Fatalf("no file: %v %v", st, err)
	}
	if err := statefile.Write(path, "h1", "l4lb test", sample()); err != nil {
		t.Fatal(err)
	}
	st, err := statefile.Read(path, "h1")
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Changes) != 1 || *st.Changes[0].Weight != 7 || st.Changes[0].Address != "198.18.1.13:5432" || !st.Backends[0].Down || st.Backends[0].Override != "drain" {
		t.Fatalf("read back %+v", st)
	}
	ents, _ := os.ReadDir(filepath.Dir(path))
	if len(ents) != 1 {
		t.Fatalf("leftovers beside the file: %v", ents)
	}
	if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v, want 0600", fi.Mode())
	}
}

func TestRefused(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.json")
	if err := statefile.Write(good, "h1", "l4lb test", sample()); err != nil {
		t.Fatal(err)
	}
	data, _ := os.ReadFile(good)
	for _, tc := range []struct {
		name, host, want string
		edit             func(string) string
	}{
		{"truncated", "h1", "corrupt: not JSON", func(s string) string { return s[:len(s)/2] }},
		{"garbage", "h1", "corrupt: not JSON", func(string) string { return "\x00\x01garbage" }},
		{"flipped", "h1", "sha256 does not match", func(s string) string { return strings.Replace(s, "198.18.1.13", "198.18.1.14", 1) }},
		{"other host", "h2", `written on host "h1"`, func(s string) string { return s }},
		{"other schema", "h1", "schema 2", func(s string) string { return strings.Replace(s, `"schema": 1`, `"schema": 2`, 1) }},
		{"foreign", "h1", "not an l4lb state file", func(s string) string { return strings.Replace(s, `"l4lb-state"`, `"haproxy"`, 1) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "_"))
			if err := os.WriteFile(p, []byte(tc.edit(string(data))), 0o600); err != nil {
				t.Fatal(err)
			}
			st, err := statefile.Read(p, tc.host)
			if st != nil || !errors.Is(err, statefile.ErrRefused) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Read = %v, %v; want refused with %q", st, err, tc.want)
			}
		})
	}
}

func TestWriterCoalesces(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.json")
	var n atomic.Int32
	w := statefile.NewWriter(path, "h1", "l4lb test", func() *statefile.State { n.Add(1); return sample() }, func(err error) { t.Error(err) })
	for range 100 {
		w.Poke()
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if at, err := w.Last(); at.IsZero() || err != nil {
		t.Fatalf("last write %v %v", at, err)
	}
	if st, err := statefile.Read(path, "h1"); err != nil || len(st.Changes) != 1 {
		t.Fatalf("read %v %v", st, err)
	}
	if n := n.Load(); n > 50 {
		t.Fatalf("%d writes for 100 pokes: not coalesced", n)
	}
}
