// Diff knows every setting: a field added to the config without a row in
// its key table fails here.

package config

import (
	"net/netip"
	"reflect"
	"testing"
	"time"

	"github.com/l4lb/l4lb/l4"
)

// bump changes the value of field f, whatever its kind; false when it
// cannot.
func bump(f reflect.Value) bool {
	switch f.Kind() {
	case reflect.String:
		f.SetString(f.String() + "x")
	case reflect.Bool:
		f.SetBool(!f.Bool())
	case reflect.Int, reflect.Int64:
		f.SetInt(f.Int() + int64(time.Second))
	case reflect.Uint8, reflect.Uint16, reflect.Uint32:
		f.SetUint(f.Uint() + 1)
	case reflect.Float64:
		f.SetFloat(f.Float() + 0.25)
	case reflect.Slice:
		f.Set(reflect.MakeSlice(f.Type(), 1, 1)) // one zero element: a list that differs from none
	case reflect.Pointer: // an optional table (a peer's bfd): one that is there
		f.Set(reflect.New(f.Type().Elem()))
	case reflect.Struct:
		switch f.Interface().(type) {
		case netip.AddrPort:
			f.Set(reflect.ValueOf(netip.MustParseAddrPort("198.18.0.1:1")))
		case netip.Addr:
			f.Set(reflect.ValueOf(netip.MustParseAddr("198.18.0.1")))
		case netip.Prefix:
			f.Set(reflect.ValueOf(netip.MustParsePrefix("198.18.0.0/24")))
		default: // a table of the config (Health): bump its first field that can be
			for i := range f.NumField() {
				if f.Type().Field(i).IsExported() && bump(f.Field(i)) {
					return true
				}
			}
			return false
		}
	default:
		return false
	}
	return true
}

// everyField changes each field of a zero T in turn (but those in skip)
// and checks that diff reports it.
func everyField[T any](t *testing.T, skip map[string]bool, diff func(o, v *T) []Change) {
	t.Helper()
	typ := reflect.TypeFor[T]()
	for i := range typ.NumField() {
		name := typ.Field(i).Name
		if skip[name] {
			continue
		}
		var o, v T
		if !bump(reflect.ValueOf(&v).Elem().Field(i)) {
			t.Errorf("%s.%s: a field of kind %s: teach bump or skip it", typ.Name(), name, typ.Field(i).Type.Kind())
			continue
		}
		if len(diff(&o, &v)) == 0 {
			t.Errorf("%s.%s changed, and Diff does not see it: give it a row in its key table", typ.Name(), name)
		}
	}
}

func all[S any](*key[S]) bool { return true }

func TestDiffKnowsEveryField(t *testing.T) {
	everyField(t, nil, func(o, v *Global) []Change { return diffGlobal(o, v) })
	// XDP.Interface is the first of XDP.Interfaces, read with it.
	everyField(t, map[string]bool{"Interface": true}, func(o, v *XDP) []Change { return compare(xdpKeys, "", o, v, all) })
	everyField(t, nil, func(o, v *Health) []Change { return compare(healthKeys, "", o, v, all) })
	// Compared elsewhere: the key (listen, protocol), health and backends
	// on their own.
	skip := map[string]bool{"Listen": true, "Protocol": true, "Health": true, "Backends": true, "Line": true}
	everyField(t, skip, func(o, v *VIP) []Change { return compare(vipKeys, "", o, v, all) })
	// A backend's Port goes with its Host (name:port); Line is where it is.
	everyField(t, map[string]bool{"Port": true, "Line": true}, func(o, v *Backend) []Change {
		c, _ := backendChange(o, v, &VIP{})
		return c.Changes
	})
}

// The restart-only keys are exactly those that l4lb reads once at start.
func TestRestartOnlyKeys(t *testing.T) {
	var got []string
	for _, k := range globalKeys {
		if k.effect == EffectRestart {
			got = append(got, "global."+k.name)
		}
	}
	for _, k := range xdpKeys {
		if k.effect == EffectRestart {
			got = append(got, "xdp."+k.name)
		}
	}
	want := []string{"global.log_format", "global.admin_socket", "global.state_file", "global.metrics_listen", "global.pipe_size", "global.workers", "global.drop_capabilities",
		"xdp.attach", "xdp.pin_path", "xdp.conntrack_size",
		"xdp.nat_source4", "xdp.nat_source6", "xdp.nat_port_min", "xdp.nat_port_max", "xdp.nat_tcp_timeout", "xdp.nat_udp_timeout"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("restart-only keys %v, want %v", got, want)
	}
}

// InForce keeps exactly the restart-only settings: after it, a running
// config and the next one differ in nothing that needs a restart, and
// still in everything else.
func TestInForceKeepsRestartOnlySettings(t *testing.T) {
	running := &Config{Global: Global{LogFormat: l4.LogConsole, AdminSocket: "/run/a.sock", PipeSize: 1 << 20, Workers: 2, LogLevel: l4.LogInfo},
		XDP: &XDP{Interface: "eth1", Interfaces: []string{"eth1"}, Attach: l4.AttachDriver, ConntrackSize: 1000, WeightRefresh: time.Second}}
	next := &Config{Global: Global{LogFormat: l4.LogJSON, AdminSocket: "/run/b.sock", MetricsListen: ":9", PipeSize: 2 << 20, Workers: 4, LogLevel: l4.LogDebug},
		XDP: &XDP{Interface: "eth2", Interfaces: []string{"eth2"}, Attach: l4.AttachGeneric, PinPath: "/sys/fs/bpf/x", ConntrackSize: 2000, WeightRefresh: 2 * time.Second}}
	if keys := RestartOnly(running, next); len(keys) != 8 {
		t.Fatalf("restart-only changes before: %v, want all 8", keys)
	}
	inForce := InForce(running, next)
	if keys := RestartOnly(running, inForce); len(keys) != 0 {
		t.Fatalf("restart-only changes left in force: %v", keys)
	}
	if inForce.Global.LogLevel != l4.LogDebug || inForce.XDP.WeightRefresh != 2*time.Second {
		t.Fatalf("InForce dropped settings a reload applies: %+v %+v", inForce.Global, inForce.XDP)
	}
	if next.Global.PipeSize != 2<<20 || next.XDP.PinPath != "/sys/fs/bpf/x" {
		t.Fatal("InForce modified its argument")
	}
}
