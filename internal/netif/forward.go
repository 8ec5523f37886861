// forward.go: the forwarding sysctls bpf_fib_lookup needs (else it answers FWD_DISABLED).

package netif

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// procSys is where the kernel's sysctls are; it follows the network
// namespace of the thread that opens it.
const procSys = "/proc/sys"

// ErrForwardingOff is returned by CheckForwarding when a family that is
// needed is not forwarded on the interface.
var ErrForwardingOff = errors.New("IP forwarding is off")

// Forwarding is the state of IPv4 and IPv6 forwarding, or the families a
// caller needs.
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
	if err := checkIfname(ifname); err != nil {
		return Forwarding{}, err
	}
	return readForwarding(procSys, ifname)
}

// CheckForwarding reads, in the calling thread's namespace, whether ifname
// forwards each family set in need. It changes nothing: for a family that
// is off it returns an error wrapping ErrForwardingOff that names the
// exact sysctl to set (the global switch when that is off too, else the
// interface's own).
func CheckForwarding(ifname string, need Forwarding) error {
	if err := checkIfname(ifname); err != nil {
		return err
	}
	return checkForwarding(procSys, ifname, need)
}

func checkIfname(ifname string) error {
	if ifname == "" || ifname == "." || ifname == ".." || filepath.Base(ifname) != ifname {
		return fmt.Errorf("forwarding of %q: bad interface name", ifname)
	}
	return nil
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

// checkForwarding is CheckForwarding under root.
func checkForwarding(root, ifname string, need Forwarding) error {
	if !need.Any() {
		return nil
	}
	global, err := readForwarding(root, "")
	if err != nil {
		return err
	}
	on, err := readForwarding(root, ifname)
	if err != nil {
		return err
	}
	var fixes, off []string
	if need.IPv4 && !on.IPv4 {
		off = append(off, "IPv4")
		if global.IPv4 {
			fixes = append(fixes, "net.ipv4.conf."+ifname+".forwarding=1")
		} else {
			fixes = append(fixes, "net.ipv4.ip_forward=1")
		}
	}
	if need.IPv6 && !on.IPv6 {
		off = append(off, "IPv6")
		if global.IPv6 {
			fixes = append(fixes, "net.ipv6.conf."+ifname+".forwarding=1")
		} else {
			fixes = append(fixes, "net.ipv6.conf.all.forwarding=1")
		}
	}
	if len(off) == 0 {
		return nil
	}
	ra := ""
	if need.IPv6 && !global.IPv6 {
		ra = "; interfaces that take their IPv6 default route from router advertisements need accept_ra=2 first"
	}
	return fmt.Errorf("%w for %s on %s (set it with `sysctl -w %s` and keep it in /etc/sysctl.d/%s)",
		ErrForwardingOff, strings.Join(off, " and "), ifname, strings.Join(fixes, " "), ra)
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
