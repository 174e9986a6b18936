package testenv

import (
	"net"
	"net/url"
	"sync/atomic"
	"testing"
)

// RoundTrips forwards TCP connections to a server and counts round trips:
// each time a client sends after the server last spoke (or first), one.
// Pipelined sends before the reply count once, as they travel together.
type RoundTrips struct {
	URL   string // the server's URL with the forwarder's address
	trips atomic.Int64
}

// CountRoundTrips starts a forwarder to the server of serverURL (any
// scheme with a host:port) until the test ends.
func CountRoundTrips(tb testing.TB, serverURL string) *RoundTrips {
	tb.Helper()
	u, err := url.Parse(serverURL)
	if err != nil {
		tb.Fatal(err)
	}
	upstream := u.Host
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { ln.Close() })
	u.Host = ln.Addr().String()
	c := &RoundTrips{URL: u.String()}
	go func() {
		for {
			client, err := ln.Accept()
			if err != nil {
				return
			}
			go c.forward(client, upstream)
		}
	}()
	return c
}

// Trips is the number of round trips so far, over every connection.
func (c *RoundTrips) Trips() int64 { return c.trips.Load() }

func (c *RoundTrips) forward(client net.Conn, upstream string) {
	defer client.Close()
	server, err := net.Dial("tcp", upstream)
	if err != nil {
		return
	}
	defer server.Close()
	var serverSpoke atomic.Bool
	serverSpoke.Store(true)
	go func() {
		buf := make([]byte, 64<<10)
		for {
			n, err := server.Read(buf)
			if n > 0 {
				serverSpoke.Store(true)
				if _, werr := client.Write(buf[:n]); werr != nil {
					return
				}
			}
			if err != nil {
				client.Close()
				return
			}
		}
	}()
	buf := make([]byte, 64<<10)
	for {
		n, err := client.Read(buf)
		if n > 0 {
			if serverSpoke.Swap(false) {
				c.trips.Add(1)
			}
			if _, werr := server.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}
