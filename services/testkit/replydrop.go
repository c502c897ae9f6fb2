package testkit

import (
	"bytes"
	"io"
	"net"
	"sync/atomic"
	"testing"
	"time"
)

// ReplyDropper is a TCP proxy in front of a server (redis-server) that,
// once armed, passes the next write containing Marker to the server and
// cuts the client's connection before the reply reaches it: the command
// runs, and the client sees only a broken connection, as after a lost
// reply. A client that retries then sends it again.
type ReplyDropper struct {
	// Addr is the proxy's address, for the client.
	Addr   string
	target string
	marker []byte
	armed  atomic.Bool
	drops  atomic.Int32
}

// NewReplyDropper proxies to target, dropping the reply to the next write
// that contains marker once Arm is called.
func NewReplyDropper(t testing.TB, target string, marker []byte) *ReplyDropper {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &ReplyDropper{Addr: ln.Addr().String(), target: target, marker: marker}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go p.serve(c)
		}
	}()
	t.Cleanup(func() { ln.Close() })
	return p
}

// Arm drops the reply to the next write containing the marker.
func (p *ReplyDropper) Arm() { p.armed.Store(true) }

// Armed reports whether the armed drop has not happened yet.
func (p *ReplyDropper) Armed() bool { return p.armed.Load() }

// Drops is the number of replies dropped.
func (p *ReplyDropper) Drops() int { return int(p.drops.Load()) }

func (p *ReplyDropper) serve(client net.Conn) {
	upstream, err := net.Dial("tcp", p.target)
	if err != nil {
		client.Close()
		return
	}
	defer upstream.Close()
	defer client.Close()
	go func() { _, _ = io.Copy(client, upstream); client.Close() }()
	buf := make([]byte, 64<<10)
	for {
		n, err := client.Read(buf)
		if n > 0 {
			chunk := buf[:n]
			drop := bytes.Contains(chunk, p.marker) && p.armed.CompareAndSwap(true, false)
			if drop {
				p.drops.Add(1)
				client.Close()
			}
			if _, werr := upstream.Write(chunk); werr != nil || drop {
				if drop {
					time.Sleep(200 * time.Millisecond) // let the server run it
				}
				return
			}
		}
		if err != nil {
			return
		}
	}
}
