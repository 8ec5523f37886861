package main

import (
	"bufio"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/l4lb/l4lb/internal/testutil"
)

// pinSyncConfig is balancer i of two proxy balancers serving bgpVIP:80
// from the first n backends with Maglev on the client address and
// affinity pins, with [flow_sync] to the other when sync is set.
func pinSyncConfig(e *testutil.ECMP, i, n int, sync bool) string {
	c := newConf(`drain_timeout = "1s"`)
	if sync {
		c.raw(fmt.Sprintf("\n[flow_sync]\nlisten = %q\npeers = [%q]\nkey = %q\ninterval = \"200ms\"\n", flowSyncAddr(e, i), flowSyncAddr(e, 1-i), flowSyncKey))
	}
	return c.vip("web", fmt.Sprintf("%s:80", bgpVIP), `algorithm = "maglev"`, `hash_key = "src_ip"`, `affinity_timeout = "10m"`).
		health(bgpProbe...).backends(n, 7000).String()
}

// TestFlowSyncProxyPins: two proxy balancers with affinity_timeout; the
// router sends the VIP to balancer 0 (a static route), 40 client
// addresses connect once each (balancer 0 pins them); a reload on both
// adds a fourth backend (Maglev on the client address now sends about a
// quarter of them elsewhere); balancer 0 is killed with SIGKILL and the
// route moved to balancer 1. With flow sync, balancer 1 installed
// balancer 0's pins and every client's next connection reaches the
// backend it had. Without it (the same test, sync off) some reach
// another: the test can fail.
func TestFlowSyncProxyPins(t *testing.T) {
	for _, on := range []bool{true, false} {
		name := "sync"
		if !on {
			name = "nosync"
		}
		t.Run(name, func(t *testing.T) { testFlowSyncProxyPins(t, on) })
	}
}

func testFlowSyncProxyPins(t *testing.T, withSync bool) {
	testutil.RequirePriv(t, "network namespaces")
	e := testutil.NewECMP(t, 2, 4, bgpVIP)
	const clients = 40
	client := func(k int) netip.Addr { return netip.AddrFrom4([4]byte{198, 18, 0, byte(100 + k)}) }
	for k := range clients {
		e.Client.MustExec(t, "ip", "addr", "add", client(k).String()+"/24", "dev", "c0")
	}
	e.Router.MustExec(t, "ip", "route", "add", host(bgpVIP).String(), "via", e.LBAddr(0).String())
	startBackendSet(t, e)
	lbs := []*lbProcess{startLBIn(t, e.LBs[0], pinSyncConfig(e, 0, 3, withSync)), startLBIn(t, e.LBs[1], pinSyncConfig(e, 1, 3, withSync))}

	// dial connects from client k and returns the backend's name.
	dial := func(k int) (string, error) {
		var c net.Conn
		err := e.Client.Do(func() (err error) {
			d := net.Dialer{Timeout: 3 * time.Second, LocalAddr: &net.TCPAddr{IP: client(k).AsSlice()}}
			c, err = d.Dial("tcp4", netip.AddrPortFrom(bgpVIP, 80).String())
			return err
		})
		if err != nil {
			return "", err
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(3 * time.Second))
		name, err := bufio.NewReader(c).ReadString('\n')
		return strings.TrimSpace(name), err
	}
	first := make([]string, clients)
	for k := range clients {
		deadline := time.Now().Add(10 * time.Second) // the balancer's first health checks
		for {
			name, err := dial(k)
			if err == nil {
				first[k] = name
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("client %s through balancer 0: %v", client(k), err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}

	for i, lb := range lbs {
		lb.writeConfig(t, pinSyncConfig(e, i, 4, withSync))
		lb.reloadOK(t)
		if n := len(lb.vip(t, "web").Backends); n != 4 {
			t.Fatalf("balancer %d: %d backends after the reload", i, n)
		}
	}
	if withSync {
		testutil.Eventually(t, 10*time.Second, "balancer 1 to hold balancer 0's pins", func() bool {
			f := lbs[1].status(t).FlowSync
			return f != nil && f.Installed >= clients
		})
		f := lbs[1].status(t).FlowSync
		t.Logf("balancer 1 flow sync: installed %d, known %d, foreign %d, unknown backend %d, from peers %d", f.Installed, f.Known, f.ForeignVIP, f.UnknownBackend, f.FromPeers)
		if f.BadAuth+f.Malformed+f.Replays+f.BadVersion+f.ForeignVIP+f.UnknownBackend+f.InstallFailed != 0 || f.Installed != clients {
			t.Errorf("balancer 1: flow sync dropped datagrams or pins, or installed a pin twice: %+v", f)
		}
	}

	lbs[0].cmd.Process.Kill()
	select {
	case <-lbs[0].exited:
	case <-time.After(5 * time.Second):
		t.Fatal("balancer 0 did not exit after SIGKILL")
	}
	e.Router.MustExec(t, "ip", "route", "replace", host(bgpVIP).String(), "via", e.LBAddr(1).String())

	var moved []string
	for k := range clients {
		name, err := dial(k)
		if err != nil {
			t.Fatalf("client %s through balancer 1: %v", client(k), err)
		}
		if name != first[k] {
			moved = append(moved, fmt.Sprintf("%s: %s -> %s", client(k), first[k], name))
		}
	}
	t.Logf("through balancer 1: %d of %d clients reached another backend than before %v", len(moved), clients, moved)
	if !withSync {
		if len(moved) == 0 {
			t.Fatal("every client kept its backend without flow sync: the test cannot tell sync from luck")
		}
		return
	}
	if len(moved) > 0 {
		t.Fatalf("%d clients lost their backend with flow sync: %v", len(moved), moved)
	}
}
