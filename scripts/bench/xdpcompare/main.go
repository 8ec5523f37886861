package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
)

// sample is one setup's figure.
type sample struct {
	round int
	value float64
}

// bench holds one benchmark's samples per side.
type bench struct{ old, new []sample }

func parse(r io.Reader) (map[string]*bench, []string, error) {
	res := map[string]*bench{}
	var order []string
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 4 {
			continue
		}
		round, err := strconv.Atoi(f[2])
		if err != nil {
			return nil, nil, fmt.Errorf("round in %q: %w", sc.Text(), err)
		}
		v, err := strconv.ParseFloat(f[3], 64)
		if err != nil {
			return nil, nil, fmt.Errorf("value in %q: %w", sc.Text(), err)
		}
		b := res[f[0]]
		if b == nil {
			b = &bench{}
			res[f[0]] = b
			order = append(order, f[0])
		}
		switch f[1] {
		case "old":
			b.old = append(b.old, sample{round, v})
		case "new":
			b.new = append(b.new, sample{round, v})
		default:
			return nil, nil, fmt.Errorf("side %q in %q", f[1], sc.Text())
		}
	}
	slices.Sort(order)
	return res, order, sc.Err()
}

// median of vs (0 for none); vs is sorted in place.
func median(vs []float64) float64 {
	if len(vs) == 0 {
		return 0
	}
	slices.Sort(vs)
	n := len(vs)
	if n%2 == 1 {
		return vs[n/2]
	}
	return (vs[n/2-1] + vs[n/2]) / 2
}

func values(ss []sample, round int) []float64 {
	var vs []float64
	for _, s := range ss {
		if round < 0 || s.round == round {
			vs = append(vs, s.value)
		}
	}
	return vs
}

// roundRatios is each round's new median over its old median.
func roundRatios(b *bench) []float64 {
	rounds := map[int]bool{}
	for _, s := range b.old {
		rounds[s.round] = true
	}
	var rs []float64
	for r := range rounds {
		o, n := median(values(b.old, r)), median(values(b.new, r))
		if o > 0 && n > 0 {
			rs = append(rs, n/o)
		}
	}
	slices.Sort(rs)
	return rs
}

func num(v float64) string {
	if v >= 100 {
		return strconv.FormatFloat(v, 'f', 0, 64)
	}
	return strconv.FormatFloat(v, 'f', 1, 64)
}

func main() {
	oldName := flag.String("old", "old", "column name of the old side")
	newName := flag.String("new", "new", "column name of the new side")
	flag.Parse()
	res, order, err := parse(os.Stdin)
	if err != nil {
		fmt.Fprintln(os.Stderr, "xdpcompare:", err)
		os.Exit(1)
	}
	w := os.Stdout
	fmt.Fprintf(w, "| benchmark | %s ns/pkt | %s ns/pkt | new / old | rounds' new / old, min-max | setups per side |\n", *oldName, *newName)
	fmt.Fprintln(w, "|---|---:|---:|---:|---|---:|")
	for _, name := range order {
		b := res[name]
		o, n := median(values(b.old, -1)), median(values(b.new, -1))
		ratio, spread := "-", "-"
		if o > 0 && n > 0 {
			ratio = fmt.Sprintf("%.2fx", n/o)
		}
		if rs := roundRatios(b); len(rs) > 0 {
			spread = fmt.Sprintf("%.2f-%.2fx", rs[0], rs[len(rs)-1])
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %d |\n", strings.TrimPrefix(name, "Benchmark"), num(o), num(n), ratio, spread, min(len(b.old), len(b.new)))
	}
}
