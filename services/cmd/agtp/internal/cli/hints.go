package cli

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"strings"
	"syscall"

	"github.com/agtpsuite/agtp/services/agtp"
	"github.com/agtpsuite/agtp/services/agtp/client"
	"github.com/quic-go/quic-go"
)

// suiteCA is where `make run` keeps the suite CA (its banner prints the
// absolute path).
const suiteCA = ".state/ca.pem"

// explain adds to a transport error what it means and what to do.
func explain(err error, addr string, c *connFlags) error {
	hint := hintFor(err, addr, c)
	if hint == "" {
		return err
	}
	return fmt.Errorf("%w\n  hint: %s", err, hint)
}

func hintFor(err error, addr string, c *connFlags) string {
	var (
		unknownCA  x509.UnknownAuthorityError
		hostname   x509.HostnameError
		invalid    x509.CertificateInvalidError
		dnsErr     *net.DNSError
		pe         *agtp.ProtocolError
		idle       *quic.IdleTimeoutError
		handshake  *quic.HandshakeTimeoutError
		transportE *quic.TransportError
	)
	msg := err.Error()
	switch {
	case errors.As(err, &unknownCA):
		return "the server's certificate is signed by a CA this machine does not trust. For the local suite, " +
			"pass the CA that `make run` prints in its banner: --cacert " + suiteCA + " (--insecure skips the check; testing only)"
	case errors.As(err, &hostname):
		return fmt.Sprintf("the certificate is for %s, not the host in the URI; connect by one of those names (for the local suite, 127.0.0.1 or localhost)",
			certNames(hostname.Certificate))
	case errors.As(err, &invalid):
		return "the server's certificate is not valid (expired, or not for server use); the operator must renew it"
	case strings.Contains(msg, "certificate required"):
		return "the server asks for a client certificate: pass --cert FILE --key FILE"
	case strings.Contains(msg, "no application protocol"):
		return "the server refused ALPN \"agtp\": it is a TLS server but not an AGTP one; AGTP's port is 4480"
	case strings.Contains(msg, "protocol version not supported"):
		return "the server does not speak TLS 1.3, which AGTP requires"
	case strings.Contains(msg, "first record does not look like a TLS handshake"):
		return "the server at " + addr + " does not speak TLS; AGTP always runs over TLS 1.3"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "nothing is listening at " + addr + ". Is the suite running (`make run`)? AGTP's default port is 4480"
	case errors.As(err, &dnsErr):
		return "the host name does not resolve; check the URI's host"
	case errors.As(err, &idle), errors.As(err, &handshake), errors.As(err, &transportE) && c.quic:
		return "no QUIC answer from " + addr + ": UDP may be blocked, or the server has QUIC off; try without --quic"
	case errors.Is(err, context.DeadlineExceeded):
		h := fmt.Sprintf("no answer within --timeout %s; raise it, or look at the server's logs", c.timeout)
		if c.quic {
			h += "; if nothing ever answers over QUIC, UDP may be blocked: try without --quic"
		}
		return h
	case errors.Is(err, client.ErrNoResponse):
		return "the server closed the connection without answering; it may have acted on the request. " +
			"Resend it with an --idempotency-key to be safe against running it twice"
	case errors.As(err, &pe):
		if pe.Reason == agtp.ReasonInvalidStatusLine {
			return "the answer is not AGTP (an HTTP server on this port?); AGTP's port is 4480"
		}
		return "the server's answer breaks the AGTP wire format (" + pe.Reason + ")"
	}
	return ""
}
