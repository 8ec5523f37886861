package main

import (
	"flag"
	"io"
	"log"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"
)

type maps []string

func (m *maps) String() string     { return strings.Join(*m, " ") }
func (m *maps) Set(s string) error { *m = append(*m, s); return nil }

func main() {
	var services maps
	flag.Var(&services, "map", "LISTEN=BACKEND[,BACKEND...], repeatable")
	flag.Parse()
	for _, s := range services {
		listen, backends, ok := strings.Cut(s, "=")
		ln, err := net.Listen("tcp", listen)
		if !ok || err != nil {
			log.Fatalf("-map %q: want LISTEN=BACKENDS (%v)", s, err)
		}
		go serve(ln.(*net.TCPListener), strings.Split(backends, ","))
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	<-sig
}

func serve(ln *net.TCPListener, backends []string) {
	for i := 0; ; i++ {
		c, err := ln.AcceptTCP()
		if err != nil { // EMFILE and the like: back off instead of spinning
			log.Print(err)
			time.Sleep(10 * time.Millisecond)
			continue
		}
		go proxy(c, backends[i%len(backends)])
	}
}

func proxy(client *net.TCPConn, addr string) {
	defer client.Close()
	b, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		log.Print(err)
		return
	}
	backend := b.(*net.TCPConn)
	defer backend.Close()
	done := make(chan struct{})
	go func() { copyHalf(backend, client); close(done) }()
	copyHalf(client, backend)
	<-done
}

// copyHalf copies one direction and passes the EOF on.
func copyHalf(dst, src *net.TCPConn) {
	io.Copy(dst, src)
	dst.CloseWrite()
}
