// Command testserver is the small backend that `make demo` and the bench
// scripts run behind l4lb: an HTTP server that names itself in every reply
// and counts what it served, plus a TCP echo, a UDP echo and a WebSocket
// echo port (which names itself in the X-Backend header of its 101).
package main

import (
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"

	"github.com/l4lb/l4lb/internal/testutil/wsecho"
)

func main() {
	name := flag.String("name", "backend", "name put in every HTTP reply")
	httpAddr := flag.String("http", ":8080", "HTTP listen address (empty = off)")
	echoAddr := flag.String("echo", "", "TCP echo listen address (empty = off)")
	udpAddr := flag.String("udp", "", "UDP echo listen address (empty = off)")
	wsAddr := flag.String("ws", "", "WebSocket echo listen address (empty = off)")
	flag.Parse()

	var served, echoed atomic.Int64
	if *httpAddr != "" {
		go serveHTTP(*httpAddr, *name, &served)
	}
	if *echoAddr != "" {
		go serveEcho(*echoAddr, &echoed)
	}
	if *udpAddr != "" {
		go serveUDP(*udpAddr, &echoed)
	}
	if *wsAddr != "" {
		ln, err := net.Listen("tcp", *wsAddr)
		if err != nil {
			log.Fatal(err)
		}
		go wsecho.Serve(ln, *name)
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	<-sig
	fmt.Printf("%s: served %d HTTP requests, %d echo sessions\n", *name, served.Load(), echoed.Load())
}

func serveHTTP(addr, name string, served *atomic.Int64) {
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		n := served.Add(1)
		fmt.Fprintf(w, "%s: request %d from %s\n", name, n, r.RemoteAddr)
	})
	mux.HandleFunc("/count", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintf(w, "%d\n", served.Load())
	})
	log.Fatal(http.ListenAndServe(addr, mux))
}

func serveEcho(addr string, echoed *atomic.Int64) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		log.Fatal(err)
	}
	for {
		c, err := ln.Accept()
		if err != nil {
			log.Fatal(err)
		}
		echoed.Add(1)
		go func() {
			defer c.Close()
			io.Copy(c, c)
		}()
	}
}

func serveUDP(addr string, echoed *atomic.Int64) {
	pc, err := net.ListenPacket("udp", addr)
	if err != nil {
		log.Fatal(err)
	}
	buf := make([]byte, 65536)
	for {
		n, from, err := pc.ReadFrom(buf)
		if err != nil {
			log.Fatal(err)
		}
		echoed.Add(1)
		pc.WriteTo(buf[:n], from)
	}
}
