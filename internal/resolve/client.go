// Client: one lookup of a name at the configured DNS servers.

package resolve

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/miekg/dns"
)

// ErrNoRecords is returned when a lookup worked but gave no address: the
// name does not exist (NXDOMAIN) or has no records of the types asked.
var ErrNoRecords = errors.New("no records")

// Family restricts a host lookup to one address family.
type Family uint8

const (
	AnyFamily Family = iota // A and AAAA
	IPv4                    // A only
	IPv6                    // AAAA only
)

// Query is one name to look up. It is comparable: equal queries share a
// Watcher.
type Query struct {
	Name   string // a host name, or the SRV name when SRV is set; no trailing dot
	SRV    bool
	Port   uint16 // host lookups: the port of every address
	Family Family // which addresses to keep (of SRV targets too)
}

// String is the query as a config file spells it: name:port or the SRV name.
func (q Query) String() string {
	if q.SRV {
		return q.Name
	}
	return net.JoinHostPort(q.Name, fmt.Sprint(q.Port))
}

// Target is one address of an answer.
type Target struct {
	Addr netip.AddrPort
	// Priority is the SRV record's priority (lower first); 0 for A/AAAA.
	Priority uint16
}

// Answer is a lookup's addresses, sorted by priority then address, and
// the smallest TTL of the records it was made of.
type Answer struct {
	Targets []Target
	TTL     time.Duration
}

// Options configure a Client. The zero value asks the nameservers of
// /etc/resolv.conf with a 2s timeout per query.
type Options struct {
	Servers []netip.AddrPort // tried in order
	Timeout time.Duration    // per query and server; 0 = 2s
	// ResolvConf is read when Servers is empty; "" = /etc/resolv.conf.
	ResolvConf string
	// HostsFile is consulted for host names, as the system resolver
	// does, in the order the hosts line of NSSwitch gives it (Debian:
	// files, then dns); read again when it changes. "" = /etc/hosts and
	// /etc/nsswitch.conf.
	HostsFile string
	NSSwitch  string
}

// Client looks names up. It is safe for concurrent use.
type Client struct {
	servers  []string
	udp, tcp *dns.Client
	hosts    *hostsFile
	order    hostsOrder
}

// NewClient makes a Client; it fails when no server is configured or
// resolv.conf cannot be read.
func NewClient(o Options) (*Client, error) {
	if o.Timeout <= 0 {
		o.Timeout = 2 * time.Second
	}
	c := &Client{udp: &dns.Client{Net: "udp", Timeout: o.Timeout}, tcp: &dns.Client{Net: "tcp", Timeout: o.Timeout},
		hosts: &hostsFile{path: cmp.Or(o.HostsFile, "/etc/hosts")}, order: readHostsOrder(cmp.Or(o.NSSwitch, "/etc/nsswitch.conf"))}
	for _, s := range o.Servers {
		c.servers = append(c.servers, s.String())
	}
	if len(c.servers) == 0 {
		path := o.ResolvConf
		if path == "" {
			path = "/etc/resolv.conf"
		}
		cc, err := dns.ClientConfigFromFile(path)
		if err != nil {
			return nil, fmt.Errorf("resolvers: %w", err)
		}
		for _, s := range cc.Servers {
			c.servers = append(c.servers, net.JoinHostPort(s, cc.Port))
		}
	}
	if len(c.servers) == 0 {
		return nil, errors.New("resolvers: none configured and none in resolv.conf")
	}
	return c, nil
}

// Servers returns the servers the client asks, as host:port.
func (c *Client) Servers() []string { return slices.Clone(c.servers) }

// Lookup resolves q once. An answer without addresses is ErrNoRecords; a
// server that fails or does not answer in time is an error, never an
// empty answer, so a caller can tell "gone" from "unknown".
func (c *Client) Lookup(ctx context.Context, q Query) (Answer, error) {
	var ttl uint32 = math.MaxUint32
	var ts []Target
	var err error
	if q.SRV {
		ts, err = c.lookupSRV(ctx, q, &ttl)
	} else {
		ts, err = c.lookupHost(ctx, q.Name, q.Port, q.Family, 0, &ttl)
	}
	if err != nil {
		return Answer{}, err
	}
	if len(ts) == 0 {
		return Answer{}, fmt.Errorf("%s: %w", q, ErrNoRecords)
	}
	slices.SortFunc(ts, func(a, b Target) int {
		if a.Priority != b.Priority {
			return int(a.Priority) - int(b.Priority)
		}
		return a.Addr.Compare(b.Addr)
	})
	return Answer{Targets: slices.CompactFunc(ts, func(a, b Target) bool { return a.Addr == b.Addr }), TTL: time.Duration(ttl) * time.Second}, nil
}

// lookupHost finds the addresses of name: in the hosts file, and by
// asking for its A and/or AAAA records, in the order nsswitch.conf gives.
func (c *Client) lookupHost(ctx context.Context, name string, port uint16, fam Family, prio uint16, ttl *uint32) ([]Target, error) {
	if c.order == filesFirst {
		if ts := c.fromHosts(name, port, fam, prio, ttl); len(ts) > 0 {
			return ts, nil
		}
	}
	out, err := c.lookupDNS(ctx, name, port, fam, prio, ttl)
	if c.order == filesLast && len(out) == 0 {
		if ts := c.fromHosts(name, port, fam, prio, ttl); len(ts) > 0 {
			return ts, nil
		}
	}
	return out, err
}

// fromHosts returns the hosts file's addresses of name. The file has no
// TTL: an answer from it holds for the shortest time (resolve_min), and
// the next lookup reads the file again if it changed.
func (c *Client) fromHosts(name string, port uint16, fam Family, prio uint16, ttl *uint32) []Target {
	var out []Target
	for _, a := range c.hosts.lookup(name, fam) {
		out = append(out, Target{Addr: netip.AddrPortFrom(a, port), Priority: prio})
	}
	if len(out) > 0 {
		*ttl = 0
	}
	return out
}

// lookupDNS asks for the A and/or AAAA records of name.
func (c *Client) lookupDNS(ctx context.Context, name string, port uint16, fam Family, prio uint16, ttl *uint32) ([]Target, error) {
	var out []Target
	for _, qt := range qtypes(fam) {
		r, err := c.exchange(ctx, name, qt)
		if err != nil {
			return nil, err
		}
		out = append(out, addresses(r.Answer, port, prio, fam, ttl)...)
	}
	return out, nil
}

func qtypes(fam Family) []uint16 {
	switch fam {
	case IPv4:
		return []uint16{dns.TypeA}
	case IPv6:
		return []uint16{dns.TypeAAAA}
	}
	return []uint16{dns.TypeA, dns.TypeAAAA}
}

// addresses takes the A and AAAA records of rrs (a CNAME chain's final
// records included: a recursive server sends the chain in one answer)
// and lowers ttl to the smallest TTL among all of rrs.
func addresses(rrs []dns.RR, port, prio uint16, fam Family, ttl *uint32) []Target {
	var out []Target
	for _, rr := range rrs {
		var a netip.Addr
		switch rr := rr.(type) {
		case *dns.A:
			a, _ = netip.AddrFromSlice(rr.A.To4())
		case *dns.AAAA:
			a, _ = netip.AddrFromSlice(rr.AAAA.To16())
		case *dns.CNAME:
			*ttl = min(*ttl, rr.Hdr.Ttl)
			continue
		default:
			continue
		}
		a = a.Unmap()
		if !a.IsValid() || fam == IPv4 && !a.Is4() || fam == IPv6 && a.Is4() {
			continue
		}
		*ttl = min(*ttl, rr.Header().Ttl)
		out = append(out, Target{Addr: netip.AddrPortFrom(a, port), Priority: prio})
	}
	return out
}

// lookupSRV asks for the SRV records of q and the addresses of their
// targets: from the answer's additional section when the server sent
// them, else by asking.
func (c *Client) lookupSRV(ctx context.Context, q Query, ttl *uint32) ([]Target, error) {
	r, err := c.exchange(ctx, q.Name, dns.TypeSRV)
	if err != nil {
		return nil, err
	}
	var out []Target
	for _, rr := range r.Answer {
		srv, ok := rr.(*dns.SRV)
		if !ok || srv.Target == "." { // "." = the service is decidedly not available (RFC 2782)
			continue
		}
		*ttl = min(*ttl, srv.Hdr.Ttl)
		ts := addresses(owned(r.Extra, srv.Target), srv.Port, srv.Priority, q.Family, ttl)
		if len(ts) == 0 {
			if ts, err = c.lookupHost(ctx, strings.TrimSuffix(srv.Target, "."), srv.Port, q.Family, srv.Priority, ttl); err != nil {
				return nil, fmt.Errorf("srv target %s: %w", srv.Target, err)
			}
		}
		out = append(out, ts...)
	}
	return out, nil
}

// owned returns the records of rrs whose owner is name.
func owned(rrs []dns.RR, name string) []dns.RR {
	var out []dns.RR
	for _, rr := range rrs {
		if strings.EqualFold(rr.Header().Name, name) {
			out = append(out, rr)
		}
	}
	return out
}

// exchange asks the servers in order for name's qtype records until one
// answers with NOERROR or NXDOMAIN (an NXDOMAIN answer has no records).
// A truncated UDP answer is asked again over TCP.
func (c *Client) exchange(ctx context.Context, name string, qtype uint16) (*dns.Msg, error) {
	m := new(dns.Msg)
	m.SetQuestion(dns.Fqdn(name), qtype)
	var errs []error
	for _, s := range c.servers {
		r, err := ask(ctx, c.udp, m, s)
		if err == nil && r.Truncated {
			r, err = ask(ctx, c.tcp, m, s)
		}
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("%s %s at %s: %w", name, dns.TypeToString[qtype], s, err))
		case r.Rcode == dns.RcodeSuccess || r.Rcode == dns.RcodeNameError:
			return r, nil
		default:
			errs = append(errs, fmt.Errorf("%s %s at %s: %s", name, dns.TypeToString[qtype], s, dns.RcodeToString[r.Rcode]))
		}
		if ctx.Err() != nil {
			break
		}
	}
	return nil, errors.Join(errs...)
}

// ask sends m to server and reads the reply. miekg/dns honours the
// context's deadline but not its cancellation, so the connection is
// closed when ctx is done: Watcher.Stop does not wait out a timeout.
func ask(ctx context.Context, c *dns.Client, m *dns.Msg, server string) (*dns.Msg, error) {
	conn, err := c.DialContext(ctx, server)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	r, _, err := c.ExchangeWithConnContext(ctx, m, conn)
	if err != nil && ctx.Err() != nil {
		err = ctx.Err()
	}
	return r, err
}
