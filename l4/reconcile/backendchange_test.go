// Run-time backend changes on the Runtime: applied to new flows, merged
// per backend, kept or ended by a reload, refused in the file's words.

package reconcile

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/l4lb/l4lb/internal/testutil"
	"github.com/l4lb/l4lb/l4"
	"github.com/l4lb/l4lb/l4/xdpplane"
)

func TestBackendChangesOnRuntime(t *testing.T) {
	s1, s2, s3 := startNamed(t, "s1"), startNamed(t, "s2"), startNamed(t, "s3")
	vipAddr := testutil.FreeTCPAddr(t)
	conf := func(w2 int) string { return fmt.Sprintf(overrideVIP, vipAddr, s1.addr, s2.addr, w2) }
	var pokes atomic.Int32
	rt := New(zaptest.NewLogger(t), Options{StateChanged: func() { pokes.Add(1) }})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		rt.Shutdown(ctx)
	})
	apply(t, rt, conf(100))

	res, err := rt.AddBackend("a", l4.BackendChange{Address: s3.addr.String(), Name: "s3"}, "alice")
	if err != nil || res.Change != "added" || res.Backend != "s3" {
		t.Fatalf("add: %+v %v", res, err)
	}
	if seen := names(t, rt, 30); seen["s3"] == 0 {
		t.Fatalf("added backend got no new flow: %v", seen)
	}
	if _, err := rt.AddBackend("a", l4.BackendChange{Address: s3.addr.String(), Name: "s3"}, "alice"); !errors.Is(err, ErrExists) {
		t.Fatalf("second add: %v", err)
	}
	if _, err := rt.AddBackend("a", l4.BackendChange{Address: "bogus"}, "alice"); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), `"bogus" is not ip:port`) {
		t.Fatalf("bad address: %v", err)
	}
	if _, err := rt.AddBackend("nope", l4.BackendChange{Address: s3.addr.String()}, "alice"); !errors.Is(err, ErrNoVIP) {
		t.Fatalf("unknown VIP: %v", err)
	}

	zero, hundred := 0, 100
	res, err = rt.SetBackend("a", "s2", BackendSet{Weight: &zero}, "bob")
	if err != nil || res.Change != "weight 0 (file 100)" || res.Unchanged {
		t.Fatalf("set: %+v %v", res, err)
	}
	if seen := names(t, rt, 30); seen["s2"] != 0 {
		t.Fatalf("s2 at weight 0 got new flows: %v", seen)
	}
	if res, err = rt.SetBackend("a", "s2", BackendSet{Weight: &zero}, "carol"); err != nil || !res.Unchanged {
		t.Fatalf("same set again: %+v %v", res, err)
	}
	if got := rt.BackendChanges(); len(got) != 2 || got[1].By != "bob" {
		t.Fatalf("changes %+v: want the add and bob's set", got)
	}
	bs, _ := backendStatus(rt, "a", "s2")
	if bs.Change != "weight 0 (file 100)" || bs.ChangeBy != "bob" || bs.ChangeSince.IsZero() {
		t.Fatalf("status of s2: %+v", bs)
	}

	// A reload of the same file keeps both; one that changes s2 ends its set.
	apply(t, rt, conf(100))
	if got := rt.BackendChanges(); len(got) != 2 {
		t.Fatalf("after a reload of the same file: %+v", got)
	}
	apply(t, rt, conf(60))
	if got := rt.BackendChanges(); len(got) != 1 || !got[0].Added {
		t.Fatalf("after a reload that changed s2: %+v", got)
	}
	if bs, _ := backendStatus(rt, "a", "s2"); bs.Weight != 60 || bs.Change != "" {
		t.Fatalf("s2 after the reload: %+v", bs)
	}
	// Setting the file's value is no change at all.
	rt.SetBackend("a", "s2", BackendSet{Weight: &zero}, "bob")
	if res, err := rt.SetBackend("a", "s2", BackendSet{Weight: &hundred}, "bob"); err != nil || len(rt.BackendChanges()) != 2 || !strings.Contains(res.Change, "weight 100 (file 60)") {
		t.Fatalf("set to 100 over a file's 60: %+v %v", res, err)
	}
	sixty := 60
	if _, err := rt.SetBackend("a", "s2", BackendSet{Weight: &sixty}, "bob"); err != nil || len(rt.BackendChanges()) != 1 {
		t.Fatalf("set to the file's value: %v %+v", err, rt.BackendChanges())
	}

	// remove of the added one: drained (nothing open), gone.
	rr, err := rt.RemoveBackend(context.Background(), "a", "s3", time.Second, false, "dave")
	if err != nil || rr.Change != "removed" || rr.LeftFlows != 0 || len(rt.BackendChanges()) != 0 {
		t.Fatalf("remove: %+v %v, changes %+v", rr, err, rt.BackendChanges())
	}
	if _, ok := backendStatus(rt, "a", "s3"); ok {
		t.Fatal("s3 listed after its removal")
	}
	// remove of a file backend: kept out until a reload changes it.
	if _, err := rt.RemoveBackend(context.Background(), "a", "s2", time.Second, false, "dave"); err != nil {
		t.Fatal(err)
	}
	apply(t, rt, conf(60))
	if _, ok := backendStatus(rt, "a", "s2"); ok || len(rt.BackendChanges()) != 1 {
		t.Fatalf("a removed file backend came back on a reload of the same file: %+v", rt.BackendChanges())
	}
	// The last backend cannot go: the file's words.
	if _, err := rt.RemoveBackend(context.Background(), "a", "s1", time.Second, true, "dave"); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "at least one [[vip.backend]] is required") {
		t.Fatalf("removing the last backend: %v", err)
	}
	if pokes.Load() == 0 || rt.Stopping() {
		t.Fatalf("state changed %d times, stopping %v", pokes.Load(), rt.Stopping())
	}
}

// TestBackendChangesNeverBlockTheFile: changes restored from a state file
// that cannot be applied with the file (here: no backend index left for
// the backends they add) are dropped and the file applies alone: l4lb
// starts.
func TestBackendChangesNeverBlockTheFile(t *testing.T) {
	s1, s2 := startNamed(t, "s1"), startNamed(t, "s2")
	rt := New(zaptest.NewLogger(t), Options{})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		rt.Shutdown(ctx)
	})
	rt.indexes = xdpplane.NewIndexPool(2) // the file's two backends, no more
	rt.RestoreBackendChanges([]l4.BackendChange{
		{VIP: "a", Backend: "s3", Added: true, Name: "s3", Address: "127.0.0.1:1"},
		{VIP: "a", Backend: "s4", Added: true, Name: "s4", Address: "127.0.0.1:2"},
	})
	apply(t, rt, fmt.Sprintf(overrideVIP, testutil.FreeTCPAddr(t), s1.addr, s2.addr, 100))
	if got := rt.BackendChanges(); len(got) != 0 {
		t.Fatalf("changes kept: %+v", got)
	}
	if seen := names(t, rt, 10); seen["s1"]+seen["s2"] != 10 {
		t.Fatalf("the file's backends do not serve: %v", seen)
	}
}
