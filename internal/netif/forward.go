// forward.go: the forwarding sysctls bpf_fib_lookup needs (else it answers FWD_DISABLED).
package netif

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
)

// procSys is where the kernel's sysctls are; it follows the network
// namespace of the thread that opens a file under it.
const procSys = "/proc/sys"

// Forwarding is the state of IPv4 and IPv6 forwarding, or a request to
// enable them.
type Forwarding struct {
	IPv4, IPv6 bool
}

// Any reports whether either family is set.
func (f Forwarding) Any() bool { return f.IPv4 || f.IPv6 }

// ReadForwarding reads net.ipv4.ip_forward and
// net.ipv6.conf.all.forwarding in the calling thread's namespace.
func ReadForwarding() (Forwarding, error) { return readForwarding(procSys, "") }

// InterfaceForwarding reads net.ipv4.conf.IF.forwarding and
// net.ipv6.conf.IF.forwarding in the calling thread's namespace:
// bpf_fib_lookup checks the value of the interface the packet came in on,
// which an administrator may have turned off after the global switch.
func InterfaceForwarding(ifname string) (Forwarding, error) {
	if ifname == "" || ifname == "." || ifname == ".." || filepath.Base(ifname) != ifname {
		return Forwarding{}, fmt.Errorf("forwarding of %q: bad interface name", ifname)
	}
	return readForwarding(procSys, ifname)
}

// EnableForwarding turns on the forwarding of each family set in want, in
// the calling thread's namespace, writing only those that are off. It
// returns what it turned on, so that the caller can log the change: see
// the package comment for what else the kernel changes with them.
func EnableForwarding(want Forwarding) (changed Forwarding, err error) {
	return enableForwarding(procSys, want)
}

func forwardingPaths(root, ifname string) (v4, v6 string) {
	if ifname == "" {
		return filepath.Join(root, "net/ipv4/ip_forward"), filepath.Join(root, "net/ipv6/conf/all/forwarding")
	}
	return filepath.Join(root, "net/ipv4/conf", ifname, "forwarding"), filepath.Join(root, "net/ipv6/conf", ifname, "forwarding")
}

func readForwarding(root, ifname string) (Forwarding, error) {
	p4, p6 := forwardingPaths(root, ifname)
	v4, err := readFlag(p4)
	if err != nil {
		return Forwarding{}, err
	}
	v6, err := readFlag(p6)
	if err != nil {
		return Forwarding{}, err
	}
	return Forwarding{IPv4: v4, IPv6: v6}, nil
}

func enableForwarding(root string, want Forwarding) (Forwarding, error) {
	p4, p6 := forwardingPaths(root, "")
	var changed Forwarding
	var err error
	if want.IPv4 {
		if changed.IPv4, err = enableFlag(p4); err != nil {
			return changed, err
		}
	}
	if want.IPv6 {
		if changed.IPv6, err = enableFlag(p6); err != nil {
			return changed, err
		}
	}
	return changed, nil
}

// readFlag reads a 0/1 sysctl; any non-zero value counts as on (IPv6
// forwarding may hold 2 on some kernels' interfaces).
func readFlag(path string) (bool, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return false, fmt.Errorf("sysctl: %w", err)
	}
	v := bytes.TrimSpace(b)
	return len(v) > 0 && !bytes.Equal(v, []byte("0")), nil
}

// enableFlag writes 1 to path unless it is on already, and says whether
// it wrote.
func enableFlag(path string) (bool, error) {
	on, err := readFlag(path)
	if err != nil || on {
		return false, err
	}
	if err := os.WriteFile(path, []byte("1\n"), 0o644); err != nil {
		return false, fmt.Errorf("sysctl: %w", err)
	}
	return true, nil
}
