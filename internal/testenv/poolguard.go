package testenv

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
)

// PoolGuard is a PostgreSQL wire-protocol proxy that refuses, as a
// transaction-mode pooler would silently mishandle, what depends on the
// session between transactions:
//
//   - a named prepared statement (Parse with a name): it lives on one server
//     connection, and the pooler sends the next query to any;
//   - a parameterised query in two round trips outside a transaction (a
//     Parse batch without Execute, Bind+Execute sent later): the second trip
//     may run on another server connection, with another client's
//     statement — wrong rows, no error (issue 16's reproduction);
//   - SET (not SET LOCAL), LISTEN and session advisory locks: state left on
//     a server connection that the next transaction, anyone's, inherits.
//
// The refused batch never reaches the server: the client gets an
// ErrorResponse naming the rule, then ReadyForQuery, so the query fails
// loudly and the connection stays usable. Tests run through it whenever
// they run through the pooler (TEST_DATABASE_POOLER_URL): whatever a future
// change adds that would break transaction pooling fails there, at once
// rather than one time in two.
type PoolGuard struct {
	ln       net.Listener
	upstream string
	named    bool
	wg       sync.WaitGroup
	parses   atomic.Int64 // named Parse messages passed on
}

// NamedParses counts the named prepared statements clients have prepared
// through a guard that lets them pass (Parse messages with a name; a batch
// refused for another reason counts too).
func (g *PoolGuard) NamedParses() int64 { return g.parses.Load() }

// StartPoolGuard listens on a free loopback port and proxies to upstream
// (host:port of PostgreSQL or of a pooler). With named, the pooler tracks
// named prepared statements (PgBouncer 1.21 or later with
// max_prepared_statements, DATABASE_POOLER_PREPARED_STATEMENTS=true): a
// Parse with a name passes, and may be bound in a later round trip, as the
// pooler prepares it again on whichever server connection runs it; an
// unnamed one still may not.
func StartPoolGuard(upstream string, named bool) (*PoolGuard, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	g := &PoolGuard{ln: ln, upstream: upstream, named: named}
	g.wg.Add(1)
	go g.accept()
	return g, nil
}

// Addr is the guard's host:port.
func (g *PoolGuard) Addr() string { return g.ln.Addr().String() }

// Close stops accepting; open connections end with their clients.
func (g *PoolGuard) Close() error {
	err := g.ln.Close()
	g.wg.Wait()
	return err
}

func (g *PoolGuard) accept() {
	defer g.wg.Done()
	for {
		c, err := g.ln.Accept()
		if err != nil {
			return
		}
		go g.serve(c)
	}
}

// guardConn is one client connection and its server side.
type guardConn struct {
	client, server net.Conn
	g              *PoolGuard
	wmu            sync.Mutex // whole messages to the client, from either side
	status         atomic.Uint32
}

func (g *PoolGuard) serve(client net.Conn) {
	defer client.Close()
	server, err := net.Dial("tcp", g.upstream)
	if err != nil {
		return
	}
	defer server.Close()
	c := &guardConn{client: client, server: server, g: g}
	c.status.Store('I')
	cr := bufio.NewReader(client)
	if !c.startup(cr) {
		return
	}
	go func() {
		c.fromServer(bufio.NewReader(server))
		client.Close()
	}()
	c.fromClient(cr)
}

const (
	sslRequest    = 80877103
	gssEncRequest = 80877104
)

// startup forwards the untyped startup message, answering "no" to SSL and
// GSS encryption requests itself (the tests' URLs say sslmode=disable).
func (c *guardConn) startup(r *bufio.Reader) bool {
	for {
		var hdr [8]byte
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			return false
		}
		n := binary.BigEndian.Uint32(hdr[:4])
		code := binary.BigEndian.Uint32(hdr[4:])
		if n < 8 || n > 1<<20 {
			return false
		}
		if code == sslRequest || code == gssEncRequest {
			if _, err := c.client.Write([]byte{'N'}); err != nil {
				return false
			}
			continue
		}
		body := make([]byte, n-8)
		if _, err := io.ReadFull(r, body); err != nil {
			return false
		}
		_, err := c.server.Write(append(hdr[:], body...))
		return err == nil
	}
}

// ReadMessage reads one message of PostgreSQL's protocol after start-up:
// its type and the whole message, header included, as it came.
func ReadMessage(r *bufio.Reader) (typ byte, msg []byte, err error) {
	var hdr [5]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return 0, nil, err
	}
	n := binary.BigEndian.Uint32(hdr[1:])
	if n < 4 || n > 1<<30 {
		return 0, nil, errors.New("bad message length")
	}
	msg = make([]byte, 5+n-4)
	copy(msg, hdr[:])
	_, err = io.ReadFull(r, msg[5:])
	return hdr[0], msg, err
}

// fromServer copies the server's messages to the client, noting each
// ReadyForQuery's transaction status (I idle, T in a transaction, E failed).
func (c *guardConn) fromServer(r *bufio.Reader) {
	for {
		typ, msg, err := ReadMessage(r)
		if err != nil {
			return
		}
		if typ == 'Z' && len(msg) == 6 {
			c.status.Store(uint32(msg[5]))
		}
		c.wmu.Lock()
		_, err = c.client.Write(msg)
		c.wmu.Unlock()
		if err != nil {
			return
		}
	}
}

// fromClient forwards the client's messages, holding the extended-protocol
// ones (Parse, Bind, Describe, Execute, Close, Flush) until the Sync that
// ends them, so that a batch is judged whole before the server sees it.
func (c *guardConn) fromClient(r *bufio.Reader) {
	var batch []byte
	var parsed, executed bool
	var problem string
	for {
		typ, msg, err := ReadMessage(r)
		if err != nil {
			return
		}
		body := msg[5:]
		switch typ {
		case 'P', 'B', 'D', 'E', 'C', 'H':
			batch = append(batch, msg...)
			switch typ {
			case 'P':
				name, rest := cstring(body)
				query, _ := cstring(rest)
				// parsed: an unnamed statement, which the next Sync ends.
				parsed = parsed || name == ""
				switch {
				case name != "" && !c.g.named && problem == "":
					problem = fmt.Sprintf("named prepared statement %q (%s)", name, short(query))
				case name != "":
					c.g.parses.Add(1)
				}
				if p := sessionState(query); p != "" && problem == "" {
					problem = p
				}
			case 'E':
				executed = true
			}
			continue
		case 'S':
			batch = append(batch, msg...)
			if problem == "" && parsed && !executed && c.status.Load() == 'I' {
				problem = "a query parsed in one round trip and bound in another outside a transaction (lib/pq without binary_parameters=yes, or a Prepare)"
			}
			out := batch
			batch, parsed, executed = nil, false, false
			if problem != "" {
				c.refuse(problem)
				problem = ""
				continue
			}
			msg = out
		case 'Q':
			q, _ := cstring(body)
			if p := sessionState(q); p != "" {
				c.refuse(p)
				continue
			}
		}
		if _, err := c.server.Write(msg); err != nil {
			return
		}
	}
}

// refuse answers the batch, which the server never saw, with an error and
// the current status, as the server answers a failed batch.
func (c *guardConn) refuse(problem string) {
	var e []byte
	for _, f := range []struct {
		code byte
		val  string
	}{{'S', "ERROR"}, {'V', "ERROR"}, {'C', "0A000"}, {'M', "pooler guard: " + problem + " breaks under a transaction-mode pooler (README, Running at scale)"}} {
		e = append(append(append(e, f.code), f.val...), 0)
	}
	e = append(e, 0)
	out := append([]byte{'E'}, binary.BigEndian.AppendUint32(nil, uint32(len(e)+4))...)
	out = append(out, e...)
	out = append(out, 'Z', 0, 0, 0, 5, byte(c.status.Load()))
	c.wmu.Lock()
	defer c.wmu.Unlock()
	_, _ = c.client.Write(out)
}

var (
	setStmt        = regexp.MustCompile(`(?is)^\s*SET\s+(\w+)`)
	listenStmt     = regexp.MustCompile(`(?is)^\s*LISTEN\b`)
	advisoryLock   = regexp.MustCompile(`(?i)\bpg_(try_)?advisory_lock(_shared)?\s*\(`)
	withHoldCursor = regexp.MustCompile(`(?is)^\s*DECLARE\b.*\bWITH\s+HOLD\b`)
)

// sessionState names what in query outlives its transaction on the server
// connection, or returns "".
func sessionState(query string) string {
	for _, stmt := range strings.Split(query, ";") {
		switch m := setStmt.FindStringSubmatch(stmt); {
		case m != nil && !strings.EqualFold(m[1], "LOCAL") && !strings.EqualFold(m[1], "TRANSACTION") && !strings.EqualFold(m[1], "CONSTRAINTS"):
			return "SET (session-level, use SET LOCAL or set_config(…, true) in a transaction): " + short(stmt)
		case listenStmt.MatchString(stmt):
			return "LISTEN: " + short(stmt)
		case withHoldCursor.MatchString(stmt):
			return "a WITH HOLD cursor: " + short(stmt)
		}
	}
	if advisoryLock.MatchString(query) {
		return "a session advisory lock (use pg_advisory_xact_lock): " + short(query)
	}
	return ""
}

func cstring(b []byte) (string, []byte) {
	for i, c := range b {
		if c == 0 {
			return string(b[:i]), b[i+1:]
		}
	}
	return string(b), nil
}

func short(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > 80 {
		return s[:80] + "…"
	}
	return s
}
