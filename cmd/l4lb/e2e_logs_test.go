// The daemon's JSON logs: one key per meaning, whatever the event.

package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/l4lb/l4lb/internal/testutil"
)

// duplicateKeys returns the keys that appear more than once at the top
// level of one JSON object (parsers keep only one of them).
func duplicateKeys(line []byte) ([]string, error) {
	dec := json.NewDecoder(bytes.NewReader(line))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, fmt.Errorf("not a JSON object: %q", line)
	}
	seen := map[string]bool{}
	var dups []string
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, err
		}
		key := tok.(string)
		if seen[key] {
			dups = append(dups, key)
		}
		seen[key] = true
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			return nil, err
		}
	}
	return dups, nil
}

func TestDuplicateKeysFinder(t *testing.T) {
	dups, err := duplicateKeys([]byte(`{"vip":"a","x":{"vip":1},"vip":"b"}`))
	if err != nil || len(dups) != 1 || dups[0] != "vip" {
		t.Fatalf("%v %v", dups, err)
	}
}

var logsConfig = newConf(`log_format = "json"`, `log_level = "debug"`).
	vip("web", ":80", `retries = 0`, `log_connections = true`).health(`interval = "200ms"`, `timeout = "100ms"`).addrs(7000, 0, 1).
	vip("dns", ":53", `protocol = "udp"`, `log_connections = true`).addrs(5300, 1).String()

// TestJSONLogsOneKeyPerField drives l4lb through events that log (start,
// backends going down, clients with no backend, UDP datagrams with no
// backend, connection and session lines of log_connections, a refused and
// an applied reload, shutdown) and checks every line for a key written
// twice.
func TestJSONLogsOneKeyPerField(t *testing.T) {
	tp := testutil.NewTopology(t, 2)
	namedEcho(t, tp, 0, 7000) // backend 1 is dead on both protocols
	lb := startLB(t, tp, logsConfig)
	lb.waitLog(t, `"msg":"backend health changed"`)
	for range 3 { // one of two TCP clients reaches the dead backend (no retries)
		if c, err := dialVIP(tp, 80); err == nil {
			c.Close()
		}
	}
	tp.Client.MustDo(t, func() error {
		c, err := net.Dial("udp4", tp.VIP.String()+":53")
		if err != nil {
			return err
		}
		defer c.Close()
		for range 3 {
			c.Write([]byte("q"))
			time.Sleep(50 * time.Millisecond)
		}
		return nil
	})
	lb.waitLog(t, `"msg":"no usable backend for VIP: `)
	good := lb.currentConfig(t)
	lb.writeConfig(t, "[[vip]]\nname = 1\n")
	lb.signal(t, syscall.SIGHUP)
	lb.waitLog(t, "reload refused")
	lb.writeConfig(t, good)
	lb.signal(t, syscall.SIGHUP)
	lb.waitLog(t, "reload applied")
	lb.signal(t, syscall.SIGTERM)
	<-lb.exited

	lines := strings.Split(strings.TrimSpace(lb.log.String()), "\n")
	if len(lines) < 8 {
		t.Fatalf("only %d log lines", len(lines))
	}
	for _, line := range lines {
		dups, err := duplicateKeys([]byte(line))
		if err != nil && !errors.Is(err, io.EOF) {
			t.Errorf("log line is not JSON (%v): %s", err, line)
			continue
		}
		if len(dups) > 0 {
			t.Errorf("keys %v written twice: %s", dups, line)
		}
	}
	checkConnLines(t, lines)
}

// checkConnLines finds log_connections' lines of both kinds among the
// daemon's, each with its keys.
func checkConnLines(t *testing.T, lines []string) {
	t.Helper()
	keys := map[string][]string{
		"connection":  {"client", "vip", "end", "duration", "bytes_in", "bytes_out", "retries"},
		"udp session": {"client", "vip", "backend", "end", "duration", "bytes_in", "bytes_out", "datagrams_in", "datagrams_out"},
	}
	found := map[string]int{}
	for _, line := range lines {
		var m map[string]any
		if json.Unmarshal([]byte(line), &m) != nil {
			continue
		}
		msg, _ := m["msg"].(string)
		want, ok := keys[msg]
		if !ok {
			continue
		}
		found[msg]++
		for _, k := range want {
			if _, ok := m[k]; !ok {
				t.Errorf("%s line without %s: %s", msg, k, line)
			}
		}
		if m["level"] != "info" {
			t.Errorf("%s line at level %v: %s", msg, m["level"], line)
		}
	}
	for msg := range keys {
		if found[msg] == 0 {
			t.Errorf("no %q line from log_connections", msg)
		}
	}
}
