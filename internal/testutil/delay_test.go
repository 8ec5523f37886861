// delay_test.go: checks that NewDelayNet adds the asked RTT per backend, carries data intact and leaks nothing.

package testutil

import (
	"bytes"
	"crypto/rand"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

const (
	delayEchoPort   = 7000
	delayConnRounds = 21
	dialTimeout     = 3 * time.Second
)

func TestDelayNet(t *testing.T) {
	RequirePriv(t, "network namespaces and TUN devices")
	ignore := goleak.IgnoreCurrent()
	t.Run("net", func(t *testing.T) {
		delays := []time.Duration{0, 5 * time.Millisecond, 20 * time.Millisecond}
		dn := NewDelayNet(t, delays)
		for i, b := range dn.Backends {
			serveEcho(t, b, fmt.Sprintf("%s:%d", dn.BackendIP(i), delayEchoPort))
		}
		serveEcho(t, dn.LB, fmt.Sprintf("%s:%d", dn.VIP, delayEchoPort))
		t.Run("sysctls", func(t *testing.T) { testDelaySysctls(t, dn) })
		t.Run("routes", func(t *testing.T) { testDelayRoutes(t, dn) })
		t.Run("connect", func(t *testing.T) { testDelayConnect(t, dn, delays) })
		t.Run("echo", func(t *testing.T) { testDelayEcho(t, dn, 2, 1<<20) })
	})
	// The subtest's cleanups have run: delay lines, servers and namespaces are gone.
	goleak.VerifyNone(t, ignore)
}

// testDelaySysctls checks that the in-process sysctl writes landed in the
// router's namespace, not the test's.
func testDelaySysctls(t *testing.T, dn *DelayNet) {
	want := map[string]string{
		"net/ipv4/ip_forward":         "1",
		"net/ipv4/conf/all/rp_filter": "0",
		"net/ipv4/conf/r0/rp_filter":  "0",
		"net/ipv4/conf/dl2/rp_filter": "0",
		"net/ipv4/conf/br0/rp_filter": "0",
	}
	dn.Router.MustDo(t, func() error {
		for k, v := range want {
			b, err := os.ReadFile("/proc/sys/" + k)
			if err != nil {
				return fmt.Errorf("read %s: %w", k, err)
			}
			if got := strings.TrimSpace(string(b)); got != v {
				t.Errorf("router %s = %s, want %s", k, got, v)
			}
		}
		return nil
	})
}

// testDelayRoutes checks the paths besides lb -> backend: client -> backend
// through lb and router, and backend -> VIP back through them.
func testDelayRoutes(t *testing.T, dn *DelayNet) {
	for _, p := range []struct {
		from *Netns
		to   string
	}{
		{dn.Client, fmt.Sprintf("%s:%d", dn.BackendIP(2), delayEchoPort)},
		{dn.Backends[1], fmt.Sprintf("%s:%d", dn.VIP, delayEchoPort)},
	} {
		c, err := dialIn(p.from, p.to)
		if err != nil {
			t.Fatalf("from %s: %v", p.from.Name, err)
		}
		checkEcho(t, c, []byte("ping"))
	}
}

// testDelayConnect checks that each backend's median connect() time from lb
// exceeds the undelayed backend's by about its delay.
func testDelayConnect(t *testing.T, dn *DelayNet, delays []time.Duration) {
	med, err := connectMedians(dn.LB, dn, len(delays), delayConnRounds)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("connect medians: %v", med)
	if med[0] > 5*time.Millisecond {
		t.Errorf("undelayed backend: median connect %v, want < 5ms", med[0])
	}
	for i := 1; i < len(delays); i++ {
		extra, d := med[i]-med[0], delays[i]
		// Lower bound: the delayed path is the undelayed one plus d plus a
		// TUN round trip, so its median can only fall short by jitter.
		// Upper bound: the delay line is a user-space goroutine, late by
		// scheduling on a loaded host (23.7ms for 20ms seen at load 11),
		// so it allows half of d, which still fails a doubled delay.
		lo, hi := d-500*time.Microsecond, d+max(3*time.Millisecond, d/2)
		if extra < lo || extra > hi {
			t.Errorf("backend %d: median connect %v over baseline, want %v..%v", i, extra, lo, hi)
		}
	}
}

// testDelayEcho sends n random bytes through backend i's delayed path and
// checks they come back intact and the delay line dropped nothing.
func testDelayEcho(t *testing.T, dn *DelayNet, i, n int) {
	c, err := dialIn(dn.LB, fmt.Sprintf("%s:%d", dn.BackendIP(i), delayEchoPort))
	if err != nil {
		t.Fatal(err)
	}
	msg := make([]byte, n)
	_, _ = rand.Read(msg)
	start := time.Now()
	checkEcho(t, c, msg)
	passed, dropped := dn.DelayStats(i)
	t.Logf("%d bytes echoed in %v; delay line passed %d, dropped %d", n, time.Since(start), passed, dropped)
	if dropped != 0 || passed < uint64(n/1500) {
		t.Errorf("delay line %d: passed %d dropped %d, want >= %d and 0", i, passed, dropped, n/1500)
	}
}

// checkEcho writes msg on c while reading it back, then closes c.
func checkEcho(t *testing.T, c net.Conn, msg []byte) {
	t.Helper()
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	werr := make(chan error, 1)
	go func() { _, err := c.Write(msg); werr <- err }()
	got := make([]byte, len(msg))
	if _, err := io.ReadFull(c, got); err != nil {
		t.Fatalf("echo read: %v", err)
	}
	if err := <-werr; err != nil {
		t.Fatalf("echo write: %v", err)
	}
	if !bytes.Equal(got, msg) {
		t.Fatalf("echo of %d bytes came back different", len(msg))
	}
}

// connectMedians connects from ns to each of n backends rounds times,
// interleaving backends so that load changes hit all alike, after one
// warm-up connect each (ARP), and returns the median per backend.
func connectMedians(ns *Netns, dn *DelayNet, n, rounds int) ([]time.Duration, error) {
	samples := make([][]time.Duration, n)
	err := ns.Do(func() error {
		for r := -1; r < rounds; r++ {
			for i := 0; i < n; i++ {
				d, err := timeConnect(fmt.Sprintf("%s:%d", dn.BackendIP(i), delayEchoPort))
				if err != nil {
					return fmt.Errorf("backend %d: %w", i, err)
				}
				if r >= 0 {
					samples[i] = append(samples[i], d)
				}
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	med := make([]time.Duration, n)
	for i, s := range samples {
		slices.Sort(s)
		med[i] = s[len(s)/2]
	}
	return med, nil
}

// timeConnect returns how long a TCP connect to addr takes.
func timeConnect(addr string) (time.Duration, error) {
	start := time.Now()
	c, err := net.DialTimeout("tcp", addr, dialTimeout)
	d := time.Since(start)
	if err != nil {
		return 0, fmt.Errorf("connect %s: %w", addr, err)
	}
	return d, c.Close()
}

// dialIn connects to addr from inside ns.
func dialIn(ns *Netns, addr string) (net.Conn, error) {
	var c net.Conn
	err := ns.Do(func() error {
		var err error
		c, err = net.DialTimeout("tcp", addr, dialTimeout)
		if err != nil {
			return fmt.Errorf("dial %s from %s: %w", addr, ns.Name, err)
		}
		return nil
	})
	return c, err
}

// serveEcho runs a TCP echo server on addr inside ns until cleanup.
func serveEcho(t *testing.T, ns *Netns, addr string) {
	t.Helper()
	var ln net.Listener
	ns.MustDo(t, func() error {
		var err error
		ln, err = net.Listen("tcp", addr)
		if err != nil {
			return fmt.Errorf("echo listen %s in %s: %w", addr, ns.Name, err)
		}
		return nil
	})
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		conns = map[net.Conn]struct{}{}
	)
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns[c] = struct{}{}
			mu.Unlock()
			wg.Go(func() {
				_, _ = io.Copy(c, c)
				_ = c.Close()
				mu.Lock()
				delete(conns, c)
				mu.Unlock()
			})
		}
	})
	t.Cleanup(func() {
		_ = ln.Close()
		mu.Lock()
		for c := range conns {
			_ = c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
}
