package loadgen

import (
	"bufio"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agtpsuite/agtp/services/agtp"
	"github.com/agtpsuite/agtp/services/edsign"
	"github.com/agtpsuite/agtp/services/rawsock"
)

// The limit responder is the least a server can do and still answer the
// benchmark's request as the suite's wire requires: TLS 1.3 with the
// front door's certificate, AGTP framing through services/agtp, and for
// every response one Ed25519 signature over a record linked into the
// calling agent's hash chain (an Attribution-Record and Audit-ID). No
// policy, no store, no other process. What it serves on the same machine,
// with the same load, request and concurrency, in the same minutes, is
// the physical limit the suite's throughput is measured against
// (docs/performance.md, "The limit").

// Flags of the limit responder's child side (ServeLimitChild); a command
// that runs it must accept them.
const (
	FlagLimitChild = "limit-child"
	FlagLimitCert  = "limit-cert"
	FlagLimitKey   = "limit-key"
)

// limitBody is the responder's answer, about the size of the demo's order.
var limitBody = []byte(`{"order_id":"ord-1001","status":"shipped","total":{"amount":"42.00","currency":"EUR"},"items":[{"sku":"sku-1","quantity":1}]}`)

// maxLimitChains bounds the chains the responder keeps (the generator's
// agents are a handful; the bound is for a misdirected client).
const maxLimitChains = 10000

// limitResponder answers every request on a connection in order.
type limitResponder struct {
	key   *edsign.Key
	limit agtp.Limits

	mu     sync.Mutex
	chains map[string]*limitChain // by Agent-ID ("" for anonymous)
	seq    atomic.Uint64
}

// limitChain is one agent's chain head; its lock orders the agent's
// records, as auditsvc's per-chain head lock does, while other agents'
// records are signed in parallel.
type limitChain struct {
	mu   sync.Mutex
	head [sha256.Size]byte
}

// ServeLimit serves the limit responder on ln with cert until ctx ends.
// Client certificates are asked for (the load generator's agents present
// theirs, as to the front door) and not verified.
func ServeLimit(ctx context.Context, ln net.Listener, cert tls.Certificate) error {
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return err
	}
	// The suite's signing (services/edsign), so that the limit stays the
	// best this code does.
	key, err := edsign.NewKey(priv)
	if err != nil {
		return err
	}
	r := &limitResponder{key: key, limit: agtp.DefaultLimits(), chains: map[string]*limitChain{}}
	conf := agtp.ServerTLSConfig(cert)
	conf.ClientAuth = tls.RequestClientCert
	// The same direct socket I/O as the suite's servers: the limit is what
	// this machine does with the best the suite's code knows.
	tl := tls.NewListener(rawsock.Listen(ln), conf)
	go func() {
		<-ctx.Done()
		_ = tl.Close()
	}()
	for {
		c, err := tl.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		go r.serve(c)
	}
}

func (r *limitResponder) serve(c net.Conn) {
	defer c.Close()
	br, bw := bufio.NewReader(c), bufio.NewWriter(c)
	var rec []byte
	for {
		_ = c.SetReadDeadline(time.Now().Add(2 * time.Minute))
		req, err := agtp.ReadRequest(br, r.limit)
		if err != nil {
			return
		}
		var jws, auditID string
		rec, jws, auditID = r.sign(rec[:0], req)
		resp := agtp.NewResponse(agtp.StatusOK, agtp.MediaTypeJSON, limitBody)
		resp.Header.Set(agtp.HeaderAttributionRecord, jws)
		resp.Header.Set(agtp.HeaderAuditID, auditID)
		if err := resp.Write(bw); err != nil {
			return
		}
		// Pipelined requests share one write.
		if br.Buffered() == 0 {
			if err := bw.Flush(); err != nil {
				return
			}
		}
	}
}

// sign links a record of req into its agent's chain and signs it: the
// record names the previous head, and its SHA-256 is the new head.
func (r *limitResponder) sign(buf []byte, req *agtp.Request) (rec []byte, jws, auditID string) {
	agent := req.Header.Get(agtp.HeaderAgentID)
	r.mu.Lock()
	ch := r.chains[agent]
	if ch == nil {
		if len(r.chains) >= maxLimitChains {
			clear(r.chains)
		}
		ch = &limitChain{}
		r.chains[agent] = ch
	}
	r.mu.Unlock()
	ch.mu.Lock()
	defer ch.mu.Unlock()
	prev := ch.head
	buf = append(buf, `{"agent_id":`...)
	buf = strconv.AppendQuote(buf, agent)
	buf = append(buf, `,"method":`...)
	buf = strconv.AppendQuote(buf, req.Method)
	buf = append(buf, `,"path":`...)
	buf = strconv.AppendQuote(buf, req.Path)
	buf = append(buf, `,"sequence":`...)
	buf = strconv.AppendUint(buf, r.seq.Add(1), 10)
	buf = append(buf, `,"status":200,"previous_audit_id":"`...)
	buf = hex.AppendEncode(buf, prev[:])
	buf = append(buf, `"}`...)
	sig := r.key.Sign(buf)
	h := sha256.New()
	h.Write(buf)
	h.Write(sig[:])
	var head [sha256.Size]byte
	h.Sum(head[:0])
	ch.head = head
	jws = base64.RawURLEncoding.EncodeToString(buf) + "." + base64.RawURLEncoding.EncodeToString(sig[:])
	return buf, jws, hex.EncodeToString(head[:])
}

// LimitProcess is the limit responder running in a child process, so that
// its CPU time is its own and the generator's is not charged to it.
type LimitProcess struct {
	// Addr is where it answers AGTP over TLS.
	Addr string
	// Pid is the child's process ID.
	Pid   int
	cmd   *exec.Cmd
	stdin io.WriteCloser
	done  chan error
}

// StartLimitProcess runs argv with the child flags (the AGTP server
// certificate and key files to serve with) and waits for its address.
func StartLimitProcess(ctx context.Context, argv []string, certFile, keyFile string) (*LimitProcess, error) {
	if len(argv) == 0 {
		return nil, errors.New("no limit responder command")
	}
	args := append(append([]string{}, argv[1:]...), "-"+FlagLimitChild, "-"+FlagLimitCert, certFile, "-"+FlagLimitKey, keyFile)
	p := &LimitProcess{cmd: exec.CommandContext(ctx, argv[0], args...), done: make(chan error, 1)}
	p.cmd.Stderr = os.Stderr
	out, err := p.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if p.stdin, err = p.cmd.StdinPipe(); err != nil {
		return nil, err
	}
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start the limit responder: %w", err)
	}
	go func() { p.done <- p.cmd.Wait() }()
	line := make(chan string, 1)
	go func() {
		s, _ := bufio.NewReader(out).ReadString('\n')
		line <- strings.TrimSpace(s)
		_, _ = io.Copy(io.Discard, out)
	}()
	select {
	case p.Addr = <-line:
	case <-time.After(30 * time.Second):
	}
	if _, _, err := net.SplitHostPort(p.Addr); err != nil {
		p.Stop()
		return nil, fmt.Errorf("the limit responder did not say where it listens (%q)", p.Addr)
	}
	p.Pid = p.cmd.Process.Pid
	return p, nil
}

// Stop ends the child (by closing its stdin) and waits for it.
func (p *LimitProcess) Stop() {
	p.stdin.Close()
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// ServeLimitChild is the child's side: it serves the limit responder on a
// loopback port with the certificate in certFile and keyFile, writes the
// address as a line to stdout, and stops when stdin reaches its end.
func ServeLimitChild(ctx context.Context, certFile, keyFile string, stdin io.Reader, stdout io.Writer) error {
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		_, _ = io.Copy(io.Discard, stdin)
		cancel()
	}()
	if _, err := fmt.Fprintln(stdout, ln.Addr().String()); err != nil {
		return err
	}
	return ServeLimit(ctx, ln, cert)
}
