// Run-time backend changes: laid over the file, checked in its words,
// dropped when a reload changes their backend.

package config_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/l4lb/l4lb/config"
	"github.com/l4lb/l4lb/l4"
)

const twoVIPs = `[[vip]]
name = "pg"
listen = "198.18.0.10:5432"
  [[vip.backend]]
  name = "db1"
  address = "198.18.1.11:5432"
  [[vip.backend]]
  address = "198.18.1.12:5432"
  weight = 50

[[vip]]
name = "web"
listen = "198.18.0.11:80"
  [[vip.backend]]
  address = "198.18.1.21:80"
`

func intp(n int) *int { return &n }

func TestBackendChangesLaid(t *testing.T) {
	file := mustParse(t, twoVIPs)
	db1 := config.FileBackend(file, "pg", "db1")
	changes := []l4.BackendChange{
		{VIP: "pg", Backend: "db1", Weight: intp(7), MaxConns: intp(30), File: config.BackendText(db1)},
		{VIP: "pg", Backend: "198.18.1.12:5432", Removed: true, File: config.BackendText(config.FileBackend(file, "pg", "198.18.1.12:5432"))},
		{VIP: "pg", Backend: "db3", Added: true, Name: "db3", Address: "198.18.1.13:5432", Backup: true, Weight: intp(20)},
	}
	c, err := config.WithBackendChanges(file, changes)
	if err != nil {
		t.Fatal(err)
	}
	bs := c.VIP("pg").Backends
	if len(bs) != 2 || bs[0].ID() != "db1" || bs[0].Weight != 7 || bs[0].MaxConns != 30 || bs[1].ID() != "db3" || !bs[1].Backup || bs[1].Weight != 20 {
		t.Fatalf("backends = %+v", bs)
	}
	if bs[0].Line != db1.Line || bs[1].Line != 0 || c.Path != file.Path {
		t.Fatalf("lines %d %d (file %d), path %q", bs[0].Line, bs[1].Line, db1.Line, c.Path)
	}
	if len(file.VIP("pg").Backends) != 2 || file.VIP("pg").Backends[0].Weight != 100 {
		t.Fatal("the file's config changed")
	}
	if w := c.VIP("web"); len(w.Backends) != 1 {
		t.Fatalf("web: %+v", w.Backends)
	}
}

// The words of a refused change are the file's.
func TestBackendChangesRefusedInFileWords(t *testing.T) {
	file := mustParse(t, twoVIPs)
	for _, tc := range []struct {
		name   string
		change l4.BackendChange
		// file is the same mistake written in the file.
		file, want string
	}{
		{"bad address", l4.BackendChange{VIP: "pg", Backend: "198.18.1.300:1", Added: true, Address: "198.18.1.300:1"},
			"  [[vip.backend]]\n  address = \"198.18.1.300:1\"\n", "is not ip:port"},
		{"self-loop", l4.BackendChange{VIP: "pg", Backend: "198.18.0.10:5432", Added: true, Address: "198.18.0.10:5432"},
			"  [[vip.backend]]\n  address = \"198.18.0.10:5432\"\n", "own listener"},
		{"weight out of range", l4.BackendChange{VIP: "pg", Backend: "db4", Added: true, Name: "db4", Address: "198.18.1.14:5432", Weight: intp(1001)},
			"  [[vip.backend]]\n  name = \"db4\"\n  address = \"198.18.1.14:5432\"\n  weight = 1001\n", "1001"},
		{"cap out of range", l4.BackendChange{VIP: "pg", Backend: "db4", Added: true, Name: "db4", Address: "198.18.1.14:5432", MaxConns: intp(-1)},
			"  [[vip.backend]]\n  name = \"db4\"\n  address = \"198.18.1.14:5432\"\n  max_conns = -1\n", "-1"},
		{"address taken", l4.BackendChange{VIP: "pg", Backend: "db5", Added: true, Name: "db5", Address: "198.18.1.11:5432"},
			"  [[vip.backend]]\n  name = \"db5\"\n  address = \"198.18.1.11:5432\"\n", "already the address"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := config.WithBackendChanges(file, []l4.BackendChange{tc.change})
			var ce *config.Error
			if !errors.As(err, &ce) {
				t.Fatalf("err = %v, want *config.Error", err)
			}
			// The same backend in the file: the same message.
			src := strings.Replace(twoVIPs, "\n[[vip]]\nname = \"web\"", tc.file+"\n[[vip]]\nname = \"web\"", 1)
			_, ferr := config.Parse("f.toml", []byte(src))
			var fe *config.Error
			if !errors.As(ferr, &fe) {
				t.Fatalf("file with the mistake: %v", ferr)
			}
			if got, want := msgs(ce), msgs(fe); got != want || !strings.Contains(got, tc.want) {
				t.Fatalf("run-time words %q, file words %q (want %q)", got, want, tc.want)
			}
			if ce.Problems[0].Line != 0 || ce.Problems[0].File != "run-time change" {
				t.Fatalf("problem %+v: want no line", ce.Problems[0])
			}
		})
	}
	// Removing the last backend: the file's "at least one" problem.
	_, err := config.WithBackendChanges(file, []l4.BackendChange{{VIP: "web", Backend: "198.18.1.21:80", Removed: true}})
	if err == nil || !strings.Contains(err.Error(), "at least one [[vip.backend]] is required") {
		t.Fatalf("removing the last backend: %v", err)
	}
	_, err = config.WithBackendChanges(file, []l4.BackendChange{{VIP: "pg", Backend: "nope", Weight: intp(1)}})
	if !errors.Is(err, config.ErrNoFileBackend) {
		t.Fatalf("set of an unknown backend: %v", err)
	}
}

func msgs(e *config.Error) string {
	var out []string
	for _, p := range e.Problems {
		out = append(out, p.Msg)
	}
	return strings.Join(out, "|")
}

// A reload keeps a change while the file leaves its backend as it was.
func TestRebaseBackendChanges(t *testing.T) {
	file := mustParse(t, twoVIPs)
	set := l4.BackendChange{VIP: "pg", Backend: "db1", Weight: intp(7), File: config.BackendText(config.FileBackend(file, "pg", "db1"))}
	add := l4.BackendChange{VIP: "web", Backend: "198.18.1.22:80", Added: true, Address: "198.18.1.22:80"}
	cfg, kept, dropped := config.RebaseBackendChanges(file, []l4.BackendChange{set, add})
	if len(kept) != 2 || len(dropped) != 0 || cfg.VIP("pg").Backends[0].Weight != 7 || len(cfg.VIP("web").Backends) != 2 {
		t.Fatalf("same file: kept %v dropped %v", kept, dropped)
	}
	// The file now sets db1's weight, and has the added backend itself.
	next := mustParse(t, strings.Replace(strings.Replace(twoVIPs, `name = "db1"`, "name = \"db1\"\n  weight = 9", 1),
		`address = "198.18.1.21:80"`, "address = \"198.18.1.21:80\"\n  [[vip.backend]]\n  address = \"198.18.1.22:80\"", 1))
	cfg, kept, dropped = config.RebaseBackendChanges(next, []l4.BackendChange{set, add})
	if len(kept) != 0 || len(dropped) != 2 || cfg.VIP("pg").Backends[0].Weight != 9 {
		t.Fatalf("changed file: kept %v dropped %v", kept, dropped)
	}
	if !strings.Contains(dropped[0].Why, "changed the backend") || !strings.Contains(dropped[1].Why, "has a backend") {
		t.Fatalf("why: %q, %q", dropped[0].Why, dropped[1].Why)
	}
	// Another backend of the VIP changed: the change stays.
	other := mustParse(t, strings.Replace(twoVIPs, "weight = 50", "weight = 60", 1))
	if _, kept, _ := config.RebaseBackendChanges(other, []l4.BackendChange{set}); len(kept) != 1 {
		t.Fatal("a change to another backend dropped the override")
	}
}
