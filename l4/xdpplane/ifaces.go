// The interfaces the XDP program runs on: several at once (a two-arm host,
// NICs of a bond), attached and detached one by one as reloads change them.

package xdpplane

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"go.uber.org/zap"

	"github.com/l4lb/l4lb/bpf"
	"github.com/l4lb/l4lb/internal/netif"
	"github.com/l4lb/l4lb/l4/plane"
)

// attach runs the program on ifc in the configured mode.
func (x *Program) attach(ifc netif.Interface) error {
	err := x.lb.Attach(ifc.Index, x.cfg.Attach)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, bpf.ErrNotSupported) && x.cfg.Attach == bpf.AttachDriver:
		return fmt.Errorf("xdp: %s: %w; its driver has no native XDP: set attach = \"generic\" in [xdp] (works on any interface, at a fraction of driver mode's speed)", ifc.Name, err)
	}
	return fmt.Errorf("xdp: %s: %w", ifc.Name, err)
}

// interfaces returns the interfaces the program runs on, in the config's
// order.
func (x *Program) interfaces() []netif.Interface {
	x.ifMu.Lock()
	defer x.ifMu.Unlock()
	return slices.Clone(x.ifaces)
}

// Interfaces returns the names of the interfaces the program runs on.
func (x *Program) Interfaces() []string {
	var out []string
	for _, ifc := range x.interfaces() {
		out = append(out, ifc.Name)
	}
	return out
}

func ifaceNames(ifaces []netif.Interface) string {
	names := make([]string, len(ifaces))
	for i, ifc := range ifaces {
		names[i] = ifc.Name
	}
	return strings.Join(names, ", ")
}

// AttachInterfaces attaches the program to those of names it does not run
// on yet (a reload's new interfaces) and returns them; the ones it runs
// on keep forwarding. On a failure it detaches what it attached and
// returns the error: nothing changed.
func (x *Program) AttachInterfaces(names []string) ([]string, error) {
	var added []string
	for _, name := range names {
		if slices.Contains(x.Interfaces(), name) {
			continue
		}
		if err := x.attachNamed(name); err != nil {
			x.DetachInterfaces(added)
			return nil, err
		}
		added = append(added, name)
	}
	return added, nil
}

// attachNamed looks name up, attaches the program there and enters it.
func (x *Program) attachNamed(name string) error {
	ifc, err := x.nl.Lookup(name)
	if err != nil {
		return fmt.Errorf("xdp: %w", err)
	}
	var attachErr error
	if !x.using(func() { attachErr = x.attach(ifc) }) {
		return errors.New("xdp: l4lb is stopping")
	}
	if attachErr != nil {
		return attachErr
	}
	x.ifMu.Lock()
	x.ifaces = append(x.ifaces, ifc)
	x.ifMu.Unlock()
	x.log.Info("xdp program attached", zap.String("interface", name), zap.String("attach", x.cfg.Attach.String()))
	return nil
}

// DetachInterfaces takes the program off the named interfaces; the others
// keep forwarding.
func (x *Program) DetachInterfaces(names []string) {
	for _, ifc := range x.interfaces() {
		if !slices.Contains(names, ifc.Name) {
			continue
		}
		var err error
		x.using(func() { err = x.lb.DetachFrom(ifc.Index) })
		if err != nil {
			x.log.Error("xdp program: detaching it failed", zap.String("interface", ifc.Name), zap.Error(err))
			continue
		}
		x.ifMu.Lock()
		x.ifaces = slices.DeleteFunc(x.ifaces, func(i netif.Interface) bool { return i.Index == ifc.Index })
		x.ifMu.Unlock()
		x.log.Info("xdp program detached", zap.String("interface", ifc.Name))
	}
}

// keepInterfaces detaches the interfaces names does not list and puts the
// others in names' order; the outer sources follow a new first interface.
func (x *Program) keepInterfaces(names []string) {
	if len(names) == 0 {
		return
	}
	var gone []string
	for _, n := range x.Interfaces() {
		if !slices.Contains(names, n) {
			gone = append(gone, n)
		}
	}
	x.DetachInterfaces(gone)
	x.ifMu.Lock()
	if len(x.ifaces) == 0 {
		x.ifMu.Unlock()
		return
	}
	first := x.ifaces[0].Index
	slices.SortStableFunc(x.ifaces, func(a, b netif.Interface) int {
		return slices.Index(names, a.Name) - slices.Index(names, b.Name)
	})
	moved := x.ifaces[0].Index != first
	x.ifMu.Unlock()
	if moved && !x.held.Load() {
		x.using(func() {
			if err := x.prepareHost(); err != nil {
				x.log.Warn("xdp: outer source addresses not changed", zap.Error(err))
			}
		})
	}
}

// interfaceStatus lists each interface with the mode the kernel runs the
// program in there, when there are several (one: XDPStatus says it).
func (x *Program) interfaceStatus() []plane.XDPInterface {
	ifaces := x.interfaces()
	if len(ifaces) < 2 {
		return nil
	}
	out := make([]plane.XDPInterface, len(ifaces))
	for i, ifc := range ifaces {
		out[i] = plane.XDPInterface{Name: ifc.Name, Attach: "none"}
		if m, ok, err := bpf.AttachedMode(ifc.Index); err == nil && ok {
			out[i].Attach = m.String()
		}
	}
	return out
}
