package loadgen

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agtpsuite/agtp/services/agtp"
	"github.com/agtpsuite/agtp/services/agtp/agtpquic"
	"github.com/agtpsuite/agtp/services/devpki"
	"github.com/agtpsuite/agtp/services/testkit"
	"github.com/quic-go/quic-go"
)

// fakeFrontDoor is a tiny real AGTP server over TLS and QUIC: it answers
// every request with 200 and a JSON body, except PROPOSE (463) and a
// method named by failWith, and counts what it saw.
type fakeFrontDoor struct {
	addr      string
	roots     *x509.CertPool
	delay     time.Duration
	accepted  atomic.Int64
	requests  atomic.Int64
	streams   atomic.Int64
	mu        sync.Mutex
	keys      map[string]string // Idempotency-Key -> body, to check replays
	replays   atomic.Int64
	mismatch  atomic.Int64
	closeNext atomic.Bool // close the connection instead of answering, once
}

func startFake(t *testing.T) *fakeFrontDoor {
	t.Helper()
	pki := testkit.PKI(t)
	cert, err := tls.LoadX509KeyPair(pki.Cert(devpki.AGTPServer), pki.Key(devpki.AGTPServer))
	if err != nil {
		t.Fatal(err)
	}
	caPEM, err := os.ReadFile(pki.CA())
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeFrontDoor{roots: x509.NewCertPool(), keys: map[string]string{}}
	f.roots.AppendCertsFromPEM(caPEM)
	conf := agtp.ServerTLSConfig(cert)

	ln, err := tls.Listen("tcp", "127.0.0.1:0", conf)
	if err != nil {
		t.Fatal(err)
	}
	f.addr = ln.Addr().String()
	ql, err := quic.ListenAddr(f.addr, conf, agtpquic.Config())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() {
		cancel()
		ln.Close()
		ql.Close()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			f.accepted.Add(1)
			wg.Go(func() { f.serveTCP(ctx, c) })
		}
	})
	wg.Go(func() {
		for {
			qc, err := ql.Accept(ctx)
			if err != nil {
				return
			}
			f.accepted.Add(1)
			wg.Go(func() {
				for {
					st, err := qc.AcceptStream(ctx)
					if err != nil {
						return
					}
					f.streams.Add(1)
					wg.Go(func() {
						defer st.Close()
						req, err := agtp.ReadRequest(bufio.NewReader(st), agtp.Limits{})
						if err != nil {
							return
						}
						bw := bufio.NewWriter(st)
						_ = f.answer(req).Write(bw)
						_ = bw.Flush()
					})
				}
			})
		}
	})
	return f
}

func (f *fakeFrontDoor) serveTCP(ctx context.Context, c net.Conn) {
	defer c.Close()
	go func() { <-ctx.Done(); c.Close() }()
	br, bw := bufio.NewReader(c), bufio.NewWriter(c)
	for {
		req, err := agtp.ReadRequest(br, agtp.Limits{})
		if err != nil {
			return
		}
		if f.closeNext.CompareAndSwap(true, false) {
			return
		}
		if err := f.answer(req).Write(bw); err != nil {
			return
		}
		if br.Buffered() == 0 {
			if err := bw.Flush(); err != nil {
				return
			}
		}
	}
}

func (f *fakeFrontDoor) answer(req *agtp.Request) *agtp.Response {
	f.requests.Add(1)
	if f.delay > 0 {
		time.Sleep(f.delay)
	}
	if key := req.Header.Get(agtp.HeaderIdempotencyKey); key != "" {
		f.mu.Lock()
		prev, seen := f.keys[key]
		f.keys[key] = string(req.Body)
		f.mu.Unlock()
		if seen {
			f.replays.Add(1)
			if prev != string(req.Body) {
				f.mismatch.Add(1)
			}
		}
	}
	status := agtp.StatusOK
	if req.Method == "PROPOSE" {
		status = agtp.StatusProposalRejected
	}
	return agtp.NewResponse(status, agtp.MediaTypeJSON, []byte(`{"ok":true}`))
}

func (f *fakeFrontDoor) target() Target {
	return Target{Addr: f.addr, ServerName: "localhost", Roots: f.roots}
}

func agents(n int) []string {
	out := make([]string, n)
	for i := range out {
		b := make([]byte, 64)
		for j := range b {
			b[j] = "0123456789abcdef"[(i+j)%16]
		}
		out[i] = string(b)
	}
	return out
}

func mustRun(t *testing.T, cfg Config) *Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r, err := Run(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		t.Fatal("run did not stop by itself")
	}
	return r
}
