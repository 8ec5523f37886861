package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"time"
)

// iperfResult is the part of `iperf3 -J` output the report needs.
type iperfResult struct {
	Error string `json:"error"`
	End   struct {
		SumSent struct {
			Retransmits int `json:"retransmits"`
		} `json:"sum_sent"`
		SumReceived struct {
			BitsPerSecond float64 `json:"bits_per_second"`
		} `json:"sum_received"`
	} `json:"end"`
}

// runBulk runs an iperf3 client (bulk TCP, client to server) and reads the
// balancer's CPU time over the measured seconds.
func runBulk(args []string) (record, error) {
	var c common
	fs := newFlags("bulk", &c)
	streams := fs.Int("P", 1, "parallel streams")
	secs := fs.Int("t", 10, "measured seconds")
	omit := fs.Int("O", 1, "seconds omitted at the start (TCP slow start)")
	if err := parse(fs, &c, args); err != nil {
		return nil, err
	}
	host, port, err := net.SplitHostPort(c.addr)
	if err != nil {
		return nil, err
	}
	total := time.Duration(*secs+*omit) * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), total+30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "iperf3", "-c", host, "-p", port, "-t", strconv.Itoa(*secs),
		"-O", strconv.Itoa(*omit), "-P", strconv.Itoa(*streams), "-J")
	cmd.Stderr = os.Stderr
	t0 := time.Now()
	w := window{t0.Add(time.Duration(*omit) * time.Second), t0.Add(total)}
	cpu := cpuWindow(c.lbPid, w)
	out, runErr := cmd.Output()
	rec := c.labels("bulk")
	rec["streams"], rec["secs"] = *streams, *secs
	putIperf(rec, out, runErr)
	if time.Now().After(w.to) { // a failed run ends early: no CPU figure then
		cpuRec := <-cpu
		putCPU(rec, cpuRec, "", 0)
		if used, ok := cpuRec["lb_cpu_s"].(float64); ok && used > 0 {
			rec["gbit_per_lb_core"] = round3(rec["gbit_s"].(float64) / (used / float64(*secs)))
		}
	}
	fmt.Fprintf(os.Stderr, "bulk %s P=%d: %.2f Gbit/s, %v retransmits, %v errors\n",
		c.addr, *streams, rec["gbit_s"], rec["retransmits"], rec["errors"])
	return rec, nil
}

// putIperf adds throughput, retransmits and errors from iperf3's JSON.
func putIperf(rec record, out []byte, runErr error) {
	rec["gbit_s"], rec["retransmits"], rec["errors"] = 0.0, 0, 0
	var r iperfResult
	err := json.Unmarshal(out, &r)
	switch {
	case err == nil && r.Error != "":
		err = fmt.Errorf("iperf3: %s", r.Error)
	case err == nil && runErr != nil:
		err = runErr
	case err != nil && runErr != nil:
		err = fmt.Errorf("iperf3: %v", runErr)
	}
	if err != nil {
		rec["errors"], rec["error_examples"] = 1, err.Error()
		return
	}
	rec["gbit_s"] = round3(r.End.SumReceived.BitsPerSecond / 1e9)
	rec["retransmits"] = r.End.SumSent.Retransmits
}
