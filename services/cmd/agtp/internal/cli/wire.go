package cli

import (
	"crypto"
	"crypto/ed25519"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"strings"
	"sync"

	"github.com/agtpsuite/agtp/services/agtp/client"
)

// wirePrinter writes the -v transcript: "* " notes, "> " for bytes sent
// and "< " for bytes received, line by line as they pass, like curl -v.
// CRLF line ends are shown as line ends; other control bytes are escaped
// so that a server cannot drive the terminal.
type wirePrinter struct {
	mu   sync.Mutex
	w    io.Writer
	dir  byte // direction of the open line, 0 when none is open
	line []byte
}

func newWirePrinter(w io.Writer) *wirePrinter { return &wirePrinter{w: w} }

func (p *wirePrinter) trace() *client.Trace {
	return &client.Trace{
		GotConn:  p.gotConn,
		Sent:     func(b []byte) { p.bytes('>', b) },
		Received: func(b []byte) { p.bytes('<', b) },
		Retry: func(err error) {
			p.note("connection closed before any answer (%v); sending again on a new connection", err)
		},
	}
}

func (p *wirePrinter) bytes(dir byte, b []byte) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.dir != dir {
		p.flushLocked()
		p.dir = dir
	}
	for len(b) > 0 {
		i := strings.IndexByte(string(b), '\n')
		if i < 0 {
			p.line = append(p.line, b...)
			return
		}
		p.line = append(p.line, b[:i]...)
		if n := len(p.line); n > 0 && p.line[n-1] == '\r' {
			p.line = p.line[:n-1]
		}
		p.emitLocked()
		b = b[i+1:]
	}
}

func (p *wirePrinter) emitLocked() {
	fmt.Fprintf(p.w, "%c %s\n", p.dir, sanitize(p.line))
	p.line = p.line[:0]
}

// flushLocked ends a partial line (a body without a final newline).
func (p *wirePrinter) flushLocked() {
	if len(p.line) > 0 {
		p.emitLocked()
	}
	p.dir = 0
}

// end flushes what is pending, before other output follows.
func (p *wirePrinter) end() {
	if p == nil {
		return
	}
	p.mu.Lock()
	p.flushLocked()
	p.mu.Unlock()
}

func (p *wirePrinter) note(format string, args ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.flushLocked()
	// A note names what the server sent (its certificate's names):
	// escaped, it cannot drive the terminal.
	fmt.Fprintf(p.w, "* %s\n", sanitize(fmt.Appendf(nil, format, args...)))
}

func (p *wirePrinter) gotConn(ci client.ConnInfo) {
	how := "new"
	if ci.Reused {
		how = "reused"
	}
	p.note("%s %s connection to %s (%s)", how, strings.ToUpper(ci.Transport), ci.Addr, ci.RemoteAddr)
	st := ci.TLS
	alpn := st.NegotiatedProtocol
	if alpn == "" {
		alpn = "none"
	}
	p.note("%s, %s, ALPN %s", tls.VersionName(st.Version), tls.CipherSuiteName(st.CipherSuite), alpn)
	if ci.EarlyData {
		p.note("request sent in QUIC 0-RTT data (before the handshake completed)")
	}
	if len(st.PeerCertificates) > 0 {
		c := st.PeerCertificates[0]
		p.note("server certificate: %s; issuer: %s; names: %s; valid until %s",
			name(c.Subject.CommonName), name(c.Issuer.CommonName), certNames(c), c.NotAfter.UTC().Format("2006-01-02"))
	}
}

func name(cn string) string {
	if cn == "" {
		return "(no CN)"
	}
	return cn
}

func certNames(c *x509.Certificate) string {
	var names []string
	names = append(names, c.DNSNames...)
	for _, ip := range c.IPAddresses {
		names = append(names, ip.String())
	}
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ", ")
}

// sanitize escapes control bytes other than tab and newline.
func sanitize(b []byte) []byte {
	clean := true
	for _, c := range b {
		if c < 0x20 && c != '\t' && c != '\n' || c == 0x7f {
			clean = false
			break
		}
	}
	if clean {
		return b
	}
	var out []byte
	for _, c := range b {
		if c < 0x20 && c != '\t' && c != '\n' || c == 0x7f {
			out = fmt.Appendf(out, `\x%02x`, c)
			continue
		}
		out = append(out, c)
	}
	return out
}

func publicHalf(k crypto.PublicKey) (ed25519.PublicKey, bool) {
	switch k := k.(type) {
	case ed25519.PublicKey:
		return k, true
	case ed25519.PrivateKey:
		return k.Public().(ed25519.PublicKey), true
	}
	return nil, false
}
