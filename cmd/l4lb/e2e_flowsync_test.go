package main

import (
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/l4lb/l4lb/internal/testutil"
)

// flowSyncKey is the shared key of the flow sync tests' balancers.
const flowSyncKey = "l4lb-test-flow-sync-key"

// flowSyncAddr is balancer i's flow sync address.
func flowSyncAddr(e *testutil.ECMP, i int) netip.AddrPort {
	return netip.AddrPortFrom(e.LBAddr(i), 7946)
}

// flowSyncConfig is xdpBGPConfig over the first n backends, with
// [flow_sync] to the other balancer when sync is set.
func flowSyncConfig(e *testutil.ECMP, i, n int, sync bool) string {
	c := newConf(`drain_timeout = "1s"`).raw("\n[xdp]\ninterface = \"x0\"\n").raw(bgpTable(e, i, `shutdown_grace = "1s"`))
	if sync {
		c.raw(fmt.Sprintf("\n[flow_sync]\nlisten = %q\npeers = [%q]\nkey = %q\ninterval = \"200ms\"\n", flowSyncAddr(e, i), flowSyncAddr(e, 1-i), flowSyncKey))
	}
	c.vip("web", fmt.Sprintf("%s:80", bgpVIP), `mode = "xdp"`, `algorithm = "maglev"`, fmt.Sprintf("maglev_table_size = %d", xdpECMPTableSize)).health(bgpProbe...)
	for j := range n {
		c.at(fmt.Sprintf("be%d", j), fmt.Sprintf("%s:80", e.BackendIP(j)))
	}
	return c.String()
}

// TestFlowSyncXDP: two xdp balancers behind the ECMP router carry 200
// long-lived TCP connections; a reload on both adds a fourth backend
// (their Maglev tables now send about a quarter of the flows elsewhere);
// then kill -9 of balancer 0 moves its connections to balancer 1. With
// flow sync, balancer 1 has balancer 0's flows pinned (installed from its
// datagrams) and every connection goes on, byte for byte, with no new
// flow on balancer 1. Without it (the same test, sync off), the
// connections Maglev now sends to the new backend break: the test can
// fail.
func TestFlowSyncXDP(t *testing.T) {
	for _, on := range []bool{true, false} {
		name := "sync"
		if !on {
			name = "nosync"
		}
		t.Run(name, func(t *testing.T) { testFlowSyncXDP(t, on) })
	}
}

func testFlowSyncXDP(t *testing.T, withSync bool) {
	testutil.RequirePriv(t, "network namespaces, BIRD, XDP")
	e := testutil.NewECMP(t, 2, 4)
	xdpECMP(t, e)
	rtr := e.StartRouter(t, 65001, 9)
	lbs := []*lbProcess{startLBIn(t, e.LBs[0], flowSyncConfig(e, 0, 3, withSync)), startLBIn(t, e.LBs[1], flowSyncConfig(e, 1, 3, withSync))}
	rtr.WaitNextHops(t, host(bgpVIP), 15*time.Second, e.LBAddr(0), e.LBAddr(1))

	const conns, size = 200, 2 << 10
	var cs []*ecmpConn
	t.Cleanup(func() {
		for _, ec := range cs {
			ec.c.Close()
		}
	})
	for k := range conns {
		port := 22000 + k
		var ec *ecmpConn
		deadline := time.Now().Add(5 * time.Second) // the first SYNs may meet an unresolved neighbour
		for {
			c, err := dialXDP(e, port)
			if err == nil {
				ec = c
				break
			}
			if k > 0 || time.Now().After(deadline) {
				t.Fatalf("connection from port %d: %v", port, err)
			}
			time.Sleep(100 * time.Millisecond)
		}
		cs = append(cs, ec)
		if err := ec.exchange(size); err != nil {
			t.Fatal(err)
		}
	}
	carried := lbs[0].vip(t, "web").XDP.NewFlows
	perBackend := map[string]int{}
	for _, ec := range cs {
		perBackend[ec.backend]++
	}
	t.Logf("%d connections: balancer 0 pinned %d, per backend %v", conns, carried, perBackend)
	if carried == 0 || carried >= conns {
		t.Fatalf("balancer 0 pinned %d of %d flows: want both balancers used", carried, conns)
	}

	// A fourth backend on both: the Maglev tables change under the
	// established flows.
	for i, lb := range lbs {
		lb.writeConfig(t, flowSyncConfig(e, i, 4, withSync))
		lb.reloadOK(t)
		if n := len(lb.vip(t, "web").Backends); n != 4 {
			t.Fatalf("balancer %d: %d backends after the reload", i, n)
		}
	}
	if withSync {
		testutil.Eventually(t, 10*time.Second, "balancer 1 to hold balancer 0's flows", func() bool {
			f := lbs[1].status(t).FlowSync
			return f != nil && f.Installed >= carried-1 // a retried first dial may have left no entry
		})
		for i, lb := range lbs {
			f := lb.status(t).FlowSync
			t.Logf("balancer %d flow sync: sent %d, installed %d, known %d, foreign %d, unknown backend %d, dropped %d", i,
				f.Sent, f.Installed, f.Known, f.ForeignVIP, f.UnknownBackend, f.Malformed+f.BadAuth+f.Replays+f.BadVersion)
			if f.BadAuth+f.Malformed+f.Replays+f.BadVersion+f.ForeignVIP+f.UnknownBackend+f.InstallFailed != 0 {
				t.Errorf("balancer %d: flow sync dropped datagrams or flows: %+v", i, f)
			}
			if !strings.Contains(lb.statusText(t), "flow sync: listen "+flowSyncAddr(e, i).String()) {
				t.Errorf("balancer %d: l4lb status shows no flow sync", i)
			}
		}
	}

	before := lbs[1].vip(t, "web").XDP.NewFlows
	lbs[0].cmd.Process.Kill()
	select {
	case <-lbs[0].exited:
	case <-time.After(5 * time.Second):
		t.Fatal("balancer 0 did not exit after SIGKILL")
	}
	rtr.WaitNextHops(t, host(bgpVIP), 5*time.Second, e.LBAddr(1))

	errs := make([]error, len(cs))
	var wg sync.WaitGroup
	for k, ec := range cs {
		wg.Go(func() { errs[k] = ec.exchange(size) })
	}
	wg.Wait()
	var broken []string
	for _, err := range errs {
		if err != nil {
			broken = append(broken, err.Error())
		}
	}
	moved := lbs[1].vip(t, "web").XDP.NewFlows - before
	t.Logf("after kill -9 of balancer 0: %d of %d connections broke; balancer 1 pinned %d new flows", len(broken), conns, moved)
	if !withSync {
		// Without sync: balancer 0's flows that the new table sends to
		// the new backend reach a server that never saw them.
		if len(broken) == 0 {
			t.Fatalf("no connection broke without flow sync: the test cannot tell sync from luck")
		}
		return
	}
	if len(broken) > 0 {
		t.Fatalf("%d connections broke with flow sync, e.g.: %s", len(broken), broken[0])
	}
	if moved != 0 {
		t.Errorf("balancer 1 pinned %d new flows after the failover: want every moved flow already in its table", moved)
	}
}
