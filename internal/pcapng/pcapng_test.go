// tshark reads what the writer writes: packets, lengths, times, comments.

package pcapng

import (
	"bytes"
	"encoding/binary"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/l4lb/l4lb/internal/testutil"
)

// udpFrame is an Ethernet/IPv4/UDP frame from 198.18.0.1:4000 to
// 198.18.0.2:53 with n payload bytes (checksums left zero).
func udpFrame(n int) []byte {
	f := []byte{2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 0x08, 0x00}
	ip := []byte{0x45, 0, 0, 0, 0, 0, 0, 0, 64, 17, 0, 0, 198, 18, 0, 1, 198, 18, 0, 2}
	binary.BigEndian.PutUint16(ip[2:], uint16(20+8+n))
	udp := []byte{0x0f, 0xa0, 0, 53, 0, 0, 0, 0}
	binary.BigEndian.PutUint16(udp[4:], uint16(8+n))
	f = append(append(f, ip...), udp...)
	return append(f, bytes.Repeat([]byte{'x'}, n)...)
}

func TestTsharkReads(t *testing.T) {
	testutil.RequireTool(t, "tshark")
	path := filepath.Join(t.TempDir(), "c.pcapng")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	w, err := NewWriter(f, "l4lb test", "veth0", 256)
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2024, 5, 6, 7, 8, 9, 123456789, time.UTC)
	small, big := udpFrame(3), udpFrame(500)
	for i, p := range []struct {
		data    []byte
		orig    int
		comment string
	}{
		{small, len(small), "verdict XDP_TX (tx), backend be1 (198.18.1.11:53)"},
		{big[:256], len(big), "odd length é"},
		{small, len(small), ""}, // 45 bytes: padded
	} {
		if err := w.WritePacket(t0.Add(time.Duration(i)*time.Millisecond), p.data, p.orig, p.comment); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("tshark", "-r", path, "-T", "fields", "-E", "separator=|",
		"-e", "frame.len", "-e", "frame.cap_len", "-e", "frame.time_epoch", "-e", "ip.dst", "-e", "udp.dstport", "-e", "frame.comment")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("tshark: %v\n%s", err, stderr.Bytes())
	}
	got := strings.Split(strings.TrimSpace(string(out)), "\n")
	want := []string{
		"45|45|1714979289.123456789|198.18.0.2|53|verdict XDP_TX (tx), backend be1 (198.18.1.11:53)",
		"542|256|1714979289.124456789|198.18.0.2|53|odd length é",
		"45|45|1714979289.125456789|198.18.0.2|53|",
	}
	if len(got) != len(want) {
		t.Fatalf("tshark read %d packets, want %d:\n%s", len(got), len(want), out)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("packet %d: %q, want %q", i+1, got[i], want[i])
		}
	}
	if w.WritePacket(t0, small, 3, "") == nil {
		t.Error("a packet longer than its frame accepted")
	}
}
