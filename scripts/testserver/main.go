package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"flag"
	"fmt"
	"io"
	"log"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/l4lb/l4lb/internal/testutil/wsecho"
)

func main() {
	name := flag.String("name", "backend", "name put in every HTTP reply")
	httpAddr := flag.String("http", ":8080", "HTTP listen address (empty = off)")
	httpsAddr := flag.String("https", "", "HTTPS listen address, self-signed certificate (empty = off)")
	echoAddr := flag.String("echo", "", "TCP echo listen address (empty = off)")
	udpAddr := flag.String("udp", "", "UDP echo listen address (empty = off)")
	wsAddr := flag.String("ws", "", "WebSocket echo listen address (empty = off)")
	get := flag.String("get", "", "client mode: GET this https URL, print the reply and exit")
	connect := flag.String("connect", "", "client mode: connect here (ip:port) whatever the URL's host")
	flag.Parse()
	if *get != "" {
		if err := fetch(*get, *connect); err != nil {
			log.Fatal(err)
		}
		return
	}

	var served, echoed atomic.Int64
	if *httpAddr != "" {
		go serveHTTP(*httpAddr, *name, &served)
	}
	if *httpsAddr != "" {
		go serveHTTPS(*httpsAddr, *name, &served)
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

// serveHTTPS answers as serveHTTP does, over TLS with a certificate made
// now (any name: the demo's client does not verify it), and names the
// server name the client sent: what l4lb's SNI routes route by.
func serveHTTPS(addr, name string, served *atomic.Int64) {
	cert, err := selfSigned(name)
	if err != nil {
		log.Fatal(err)
	}
	srv := &http.Server{
		Addr:      addr,
		TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}},
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			n := served.Add(1)
			fmt.Fprintf(w, "%s: request %d from %s, TLS server name %q\n", name, n, r.RemoteAddr, r.TLS.ServerName)
		}),
	}
	log.Fatal(srv.ListenAndServeTLS("", ""))
}

// fetch GETs url over TLS (the server name is the URL's host; the
// certificate is not verified: the demo's backends make their own) from
// the address connect, and prints the body.
func fetch(url, connect string) error {
	dial := &net.Dialer{Timeout: 3 * time.Second}
	tr := &http.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true},
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			if connect != "" {
				addr = connect
			}
			return dial.DialContext(ctx, network, addr)
		},
	}
	c := &http.Client{Transport: tr, Timeout: 5 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, err = io.Copy(os.Stdout, resp.Body)
	return err
}

// selfSigned makes a throwaway certificate for name.
func selfSigned(name string) (tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: name},
		DNSNames:     []string{name},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("certificate: %w", err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, nil
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
