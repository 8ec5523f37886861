package main

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
)

// percentile returns the p-th percentile (0..100) of sorted, 0 if empty.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(p / 100 * float64(len(sorted)-1))
	return sorted[i]
}

// putLatency sorts lat and adds its p50/p99/max to rec in unit (µs or ms).
func putLatency(rec record, prefix string, lat []time.Duration, unit time.Duration) {
	slices.Sort(lat)
	suffix := map[time.Duration]string{time.Microsecond: "_us", time.Millisecond: "_ms"}[unit]
	f := func(d time.Duration) float64 { return round3(float64(d) / float64(unit)) }
	rec[prefix+"p50"+suffix] = f(percentile(lat, 50))
	rec[prefix+"p99"+suffix] = f(percentile(lat, 99))
	if len(lat) > 0 {
		rec[prefix+"max"+suffix] = f(lat[len(lat)-1])
	}
}

func round3(x float64) float64 {
	v, _ := strconv.ParseFloat(strconv.FormatFloat(x, 'f', 3, 64), 64)
	return v
}

// clockTicks is USER_HZ, 100 on every Linux architecture Go supports
// (the kernel reports utime/stime in these units whatever CONFIG_HZ is).
const clockTicks = 100

// The balancer is a process tree: l4lb, iocopy and HAProxy are one
// process, nginx is a master with a worker. Every figure below sums the
// tree rooted at the PID the script gives, read afresh at each sample, so
// a worker's CPU time, memory and sockets count as the balancer's.

// procTree returns pid and its descendants (ppid links from /proc).
func procTree(pid int) []int {
	ents, _ := os.ReadDir("/proc")
	children := map[int][]int{}
	for _, e := range ents {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if f, err := statFields(p); err == nil {
			if ppid, err := strconv.Atoi(f[1]); err == nil {
				children[ppid] = append(children[ppid], p)
			}
		}
	}
	tree := []int{pid}
	for i := 0; i < len(tree); i++ {
		tree = append(tree, children[tree[i]]...)
	}
	return tree
}

// statFields returns the fields of /proc/PID/stat after the command name
// (which may hold spaces): [0] is the state, [1] the parent PID.
func statFields(pid int) ([]string, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return nil, err
	}
	s := string(b)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(fields) < 13 {
		return nil, fmt.Errorf("short /proc/%d/stat", pid)
	}
	return fields, nil
}

// sumTree adds f over the process tree of pid. The root must answer; a
// descendant that exits between the scan and the read is left out.
func sumTree[T int | int64 | float64](pid int, f func(int) (T, error)) (T, error) {
	var total T
	for i, p := range procTree(pid) {
		v, err := f(p)
		if err != nil {
			if i == 0 {
				return 0, err
			}
			continue
		}
		total += v
	}
	return total, nil
}

// cpuSeconds returns utime+stime of the balancer's process tree (all threads).
func cpuSeconds(pid int) (float64, error) { return sumTree(pid, procCPUSeconds) }

// rssKiB returns VmRSS summed over the balancer's process tree, in KiB.
func rssKiB(pid int) (int64, error) { return sumTree(pid, procRSSKiB) }

// openFDs counts the open descriptors of the balancer's process tree.
func openFDs(pid int) (int, error) { return sumTree(pid, procFDs) }

// procCPUSeconds returns utime+stime of one process (all its threads).
func procCPUSeconds(pid int) (float64, error) {
	fields, err := statFields(pid)
	if err != nil {
		return 0, err
	}
	utime, err1 := strconv.ParseUint(fields[11], 10, 64)
	stime, err2 := strconv.ParseUint(fields[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("bad /proc/%d/stat", pid)
	}
	return float64(utime+stime) / clockTicks, nil
}

// procRSSKiB returns VmRSS of one process in KiB.
func procRSSKiB(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			f := strings.Fields(rest)
			if len(f) > 0 {
				return strconv.ParseInt(f[0], 10, 64)
			}
		}
	}
	return 0, fmt.Errorf("no VmRSS in /proc/%d/status", pid)
}

// procFDs counts the open file descriptors of one process.
func procFDs(pid int) (int, error) {
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	return len(ents), err
}

// cpuWindow reads the balancer's CPU time at w.from and w.to in the
// background and delivers the figures (empty without a pid).
func cpuWindow(pid int, w window) <-chan record {
	ch := make(chan record, 1)
	go func() {
		time.Sleep(time.Until(w.from))
		m := startCPU(pid)
		time.Sleep(time.Until(w.to))
		r := record{}
		m.put(r)
		ch <- r
	}()
	return ch
}

// putCPU copies the CPU figures of cpu into rec and adds key: CPU µs per
// unit of work, n units done in the window.
func putCPU(rec, cpu record, key string, n int) {
	for k, v := range cpu {
		rec[k] = v
	}
	if used, ok := cpu["lb_cpu_s"].(float64); ok && key != "" && n > 0 {
		rec[key] = round3(used * 1e6 / float64(n))
	}
}

// cpuMeter measures a balancer's CPU time over a window; a zero pid
// measures nothing.
type cpuMeter struct {
	pid   int
	start float64
	t0    time.Time
	err   error
}

func startCPU(pid int) *cpuMeter {
	m := &cpuMeter{pid: pid, t0: time.Now()}
	if pid > 0 {
		m.start, m.err = cpuSeconds(pid)
	}
	return m
}

// put adds the CPU seconds used since start, and the share of one core, to
// rec; it returns the seconds (negative when unknown).
func (m *cpuMeter) put(rec record) float64 {
	if m.pid <= 0 {
		return -1
	}
	end, err := cpuSeconds(m.pid)
	if m.err != nil || err != nil {
		rec["lb_cpu_error"] = fmt.Sprint(m.err, err)
		return -1
	}
	used := end - m.start
	rec["lb_cpu_s"] = round3(used)
	rec["lb_cpu_pct"] = round3(100 * used / time.Since(m.t0).Seconds())
	return used
}
