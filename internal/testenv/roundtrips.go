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
	c := &RoundTrips{}
	c.URL = Forward(tb, serverURL, c.forward)
	return c
}

// Forward listens on a loopback port until the test ends, and serves each
// connection it accepts with a new connection to the server of serverURL
// (any scheme with a host:port), both closed when serve returns. It
// returns serverURL with the listener's address.
func Forward(tb testing.TB, serverURL string, serve func(client, server net.Conn)) string {
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
	go func() {
		for {
			client, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer client.Close()
				server, err := net.Dial("tcp", upstream)
				if err != nil {
					return
				}
				defer server.Close()
				serve(client, server)
			}()
		}
	}()
	return u.String()
}

// Trips is the number of round trips so far, over every connection.
func (c *RoundTrips) Trips() int64 { return c.trips.Load() }

func (c *RoundTrips) forward(client, server net.Conn) {
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
