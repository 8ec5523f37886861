// xdppass.go: the two veth traps of native XDP in tests: a peer XDP program for XDP_TX, and tx checksum offload.

package testutil

import (
	"fmt"
	"net"
	"testing"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"
)

// xdpPass is the XDP verdict that hands the frame to the stack.
const xdpPass = 2

// AttachPassXDP attaches, in driver mode, an XDP program that passes every
// frame to ifname inside ns, until cleanup. A veth delivers what its
// peer's native XDP program sends with XDP_TX (or a redirect) only when it
// has an XDP program of its own; without one the frames vanish while the
// sender counts them as sent.
func AttachPassXDP(t testing.TB, ns *Netns, ifname string) {
	t.Helper()
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Name:         "l4t_xdp_pass",
		Type:         ebpf.XDP,
		License:      "GPL",
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, xdpPass), asm.Return()},
	})
	if err != nil {
		t.Fatalf("load XDP_PASS program: %v", err)
	}
	// The link holds its own reference to the program.
	defer prog.Close()
	var l link.Link
	ns.MustDo(t, func() error {
		ifindex, err := ifIndex(ifname)
		if err != nil {
			return err
		}
		l, err = link.AttachXDP(link.XDPOptions{Program: prog, Interface: ifindex, Flags: link.XDPDriverMode})
		if err != nil {
			return fmt.Errorf("attach XDP_PASS to %s in %s: %w", ifname, ns.Name, err)
		}
		return nil
	})
	t.Cleanup(func() { _ = l.Close() })
}

// ifIndex returns the index of ifname in the calling thread's namespace.
func ifIndex(ifname string) (int, error) {
	ifc, err := net.InterfaceByName(ifname)
	if err != nil {
		return 0, fmt.Errorf("interface %s: %w", ifname, err)
	}
	return ifc.Index, nil
}

// TxChecksumOff turns tx checksum offload off on ifname inside ns, as
// `ethtool -K IF tx off` does. A veth otherwise leaves TCP and UDP
// checksums for the receiver to fill in, and a native XDP program that
// sends such a frame on (XDP_TX, redirect) delivers it with a bad one.
func TxChecksumOff(t testing.TB, ns *Netns, ifname string) {
	t.Helper()
	ns.MustDo(t, func() error {
		_, err := ethtoolValue(ifname, unix.ETHTOOL_STXCSUM, 0)
		return err
	})
}

// TxChecksum reports whether tx checksum offload is on for ifname inside ns.
func TxChecksum(t testing.TB, ns *Netns, ifname string) bool {
	t.Helper()
	var on uint32
	ns.MustDo(t, func() error {
		var err error
		on, err = ethtoolValue(ifname, unix.ETHTOOL_GTXCSUM, 0)
		return err
	})
	return on != 0
}

// ifreqData is struct ifreq with a pointer in its union (40 bytes on
// 64-bit Linux), as SIOCETHTOOL takes it.
type ifreqData struct {
	name [unix.IFNAMSIZ]byte
	data unsafe.Pointer
	_    [16]byte
}

// ethtoolValue runs one legacy ethtool get/set command that carries a
// struct ethtool_value, on ifname in the calling thread's namespace (the
// socket's namespace decides which interface the name means).
func ethtoolValue(ifname string, cmd, data uint32) (uint32, error) {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return 0, fmt.Errorf("ethtool socket: %w", err)
	}
	defer unix.Close(fd)
	v := struct{ cmd, data uint32 }{cmd, data}
	var ifr ifreqData
	copy(ifr.name[:unix.IFNAMSIZ-1], ifname)
	ifr.data = unsafe.Pointer(&v)
	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.SIOCETHTOOL, uintptr(unsafe.Pointer(&ifr))); errno != 0 {
		return 0, fmt.Errorf("ethtool %#x on %s: %w", cmd, ifname, errno)
	}
	return v.data, nil
}
