package agtp

import (
	"crypto/tls"
	"crypto/x509"
)

// ALPN is the application protocol identifier AGTP negotiates on TCP/TLS
// and QUIC (docs/decisions.md#D-tls-alpn, following draft-09's bindings).
const ALPN = "agtp"

// ServerTLSConfig returns the TLS configuration of an AGTP server: TLS
// 1.3 only (core §10.1 refuses 1.2 and older) and ALPN "agtp".
//
// ALPN outcomes on TCP, as crypto/tls negotiates them:
//   - a client offering "agtp" gets it;
//   - a client sending no ALPN is accepted (docs/decisions.md#D-tls-alpn),
//     as is one offering only "http/1.1", which crypto/tls treats the same
//     way; the latter then fails at the request line with 400;
//   - a client offering only other protocols (e.g. "h2") fails the
//     handshake with no_application_protocol.
//
// QUIC requires ALPN, so there only "agtp" connects. Client certificates
// (AGTP-CERT, lifecycle genesis_issuer mode) are left to the caller: set
// ClientAuth and ClientCAs on the result as the deployment needs.
func ServerTLSConfig(certs ...tls.Certificate) *tls.Config {
	return &tls.Config{
		MinVersion:   tls.VersionTLS13,
		NextProtos:   []string{ALPN},
		Certificates: certs,
	}
}

// ClientTLSConfig returns the TLS configuration of an AGTP client: TLS
// 1.3 only, ALPN "agtp", server certificates verified against roots (the
// system pool when roots is nil) for serverName. certs, if any, are
// presented for mutual TLS.
func ClientTLSConfig(serverName string, roots *x509.CertPool, certs ...tls.Certificate) *tls.Config {
	return &tls.Config{
		MinVersion:   tls.VersionTLS13,
		NextProtos:   []string{ALPN},
		ServerName:   serverName,
		RootCAs:      roots,
		Certificates: certs,
	}
}
