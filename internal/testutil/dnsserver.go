// DNSServer: a real DNS server (github.com/miekg/dns) whose records a test
// changes while l4lb watches them.

package testutil

import (
	"net"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// SRVRecord is one SRV record of DNSServer.SetSRV.
type SRVRecord struct {
	Priority, Weight, Port uint16
	Target                 string // a host name (no trailing dot)
}

// DNSServer answers A, AAAA and SRV questions, over UDP and TCP, from
// records the test sets. Names it does not know get NXDOMAIN; a known
// name without records of the asked type an empty NOERROR answer.
type DNSServer struct {
	Addr    netip.AddrPort
	servers []*dns.Server
	queries atomic.Int64
	silent  atomic.Bool

	mu    sync.Mutex
	hosts map[string][]dns.RR // fqdn -> A and AAAA records
	srvs  map[string][]dns.RR // fqdn -> SRV records
}

// StartDNSServer serves on addr (use port 0 for any) in namespace ns, or
// in the test's own namespace when ns is nil, until the test ends.
func StartDNSServer(t testing.TB, ns *Netns, addr string) *DNSServer {
	t.Helper()
	s := &DNSServer{hosts: map[string][]dns.RR{}, srvs: map[string][]dns.RR{}}
	var pc net.PacketConn
	var ln net.Listener
	listen := func() error {
		var err error
		if pc, err = net.ListenPacket("udp", addr); err != nil {
			return err
		}
		if ln, err = net.Listen("tcp", pc.LocalAddr().String()); err != nil {
			pc.Close()
		}
		return err
	}
	var err error
	// With port 0 the TCP listener takes the port the UDP socket got,
	// which another socket may hold: try a few.
	for range 20 {
		if ns != nil {
			err = ns.Do(listen)
		} else {
			err = listen()
		}
		if err == nil || !strings.HasSuffix(addr, ":0") {
			break
		}
	}
	if err != nil {
		t.Fatalf("dns server: %v", err)
	}
	s.Addr = pc.LocalAddr().(*net.UDPAddr).AddrPort()
	h := dns.HandlerFunc(s.serve)
	s.servers = []*dns.Server{{PacketConn: pc, Handler: h}, {Listener: ln, Handler: h}}
	for _, srv := range s.servers {
		started := make(chan struct{})
		srv.NotifyStartedFunc = func() { close(started) }
		go srv.ActivateAndServe()
		select {
		case <-started:
		case <-time.After(10 * time.Second):
			t.Fatal("dns server did not start")
		}
	}
	t.Cleanup(func() {
		for _, srv := range s.servers {
			srv.Shutdown()
		}
	})
	return s
}

// Queries counts the questions the server received (answered or not).
func (s *DNSServer) Queries() int64 { return s.queries.Load() }

// SetSilent makes the server ignore every question (a resolver that
// stopped answering: clients time out), or answer again.
func (s *DNSServer) SetSilent(on bool) { s.silent.Store(on) }

// SetHost replaces the A and AAAA records of name; no addresses removes
// the name (NXDOMAIN).
func (s *DNSServer) SetHost(name string, ttl uint32, addrs ...netip.Addr) {
	fq := dns.Fqdn(strings.ToLower(name))
	var rrs []dns.RR
	for _, a := range addrs {
		if a.Is4() {
			rrs = append(rrs, &dns.A{Hdr: dns.RR_Header{Name: fq, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: ttl}, A: a.AsSlice()})
		} else {
			rrs = append(rrs, &dns.AAAA{Hdr: dns.RR_Header{Name: fq, Rrtype: dns.TypeAAAA, Class: dns.ClassINET, Ttl: ttl}, AAAA: a.AsSlice()})
		}
	}
	s.set(s.hosts, fq, rrs)
}

// SetSRV replaces the SRV records of name; none removes the name.
func (s *DNSServer) SetSRV(name string, ttl uint32, recs ...SRVRecord) {
	fq := dns.Fqdn(strings.ToLower(name))
	var rrs []dns.RR
	for _, r := range recs {
		rrs = append(rrs, &dns.SRV{Hdr: dns.RR_Header{Name: fq, Rrtype: dns.TypeSRV, Class: dns.ClassINET, Ttl: ttl},
			Priority: r.Priority, Weight: r.Weight, Port: r.Port, Target: dns.Fqdn(strings.ToLower(r.Target))})
	}
	s.set(s.srvs, fq, rrs)
}

func (s *DNSServer) set(m map[string][]dns.RR, fq string, rrs []dns.RR) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(rrs) == 0 {
		delete(m, fq)
		return
	}
	m[fq] = rrs
}

func (s *DNSServer) serve(w dns.ResponseWriter, q *dns.Msg) {
	s.queries.Add(1)
	if s.silent.Load() || len(q.Question) != 1 {
		return // no reply: the client times out
	}
	r := new(dns.Msg)
	r.SetReply(q)
	r.Authoritative = true
	qn := strings.ToLower(q.Question[0].Name)
	s.mu.Lock()
	hosts, isHost := s.hosts[qn]
	srvs, isSRV := s.srvs[qn]
	switch q.Question[0].Qtype {
	case dns.TypeA, dns.TypeAAAA:
		for _, rr := range hosts {
			if rr.Header().Rrtype == q.Question[0].Qtype {
				r.Answer = append(r.Answer, dns.Copy(rr))
			}
		}
	case dns.TypeSRV:
		for _, rr := range srvs {
			r.Answer = append(r.Answer, dns.Copy(rr))
			for _, a := range s.hosts[rr.(*dns.SRV).Target] {
				r.Extra = append(r.Extra, dns.Copy(a))
			}
		}
	}
	s.mu.Unlock()
	if !isHost && !isSRV {
		r.Rcode = dns.RcodeNameError
	}
	_ = w.WriteMsg(r)
}
