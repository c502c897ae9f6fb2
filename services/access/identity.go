// Package access decides who may call which internal RPC.
//
// A caller of an internal API is one of three kinds of client identity,
// read from its verified client certificate and never from the request:
// one of the suite's services, an operator (a person or tool that
// administers the suite), or an internal system of the organisation that
// calls the read and data APIs. Agents are none of them: their
// certificates come from the Genesis issuer or the agent CA, which the
// internal listeners do not trust, and a certificate naming an Agent-ID is
// refused even if the suite CA signed it.
//
// Each service declares a Table: for every RPC, the identities allowed to
// call it. Anything the table does not name is refused (deny by default).
// Guard enforces the tables for gRPC (unary and streaming) and for the
// REST gateway, which forwards the HTTP client's identity to the gRPC
// server it proxies to. docs/access.md explains the model and carries the
// tables, generated from the code.
package access

import (
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"strings"
)

// Kind is the kind of a client identity.
type Kind string

// The three kinds of client identity.
const (
	Service  Kind = "service"
	Operator Kind = "operator"
	System   Kind = "system"
)

// Identity is who a client certificate says its holder is.
type Identity struct {
	Kind Kind
	Name string
}

// String is the identity as kind/name, the form logs, the identity map and
// the forwarded gateway caller use.
func (id Identity) String() string {
	if id.Kind == "" {
		return "none"
	}
	return string(id.Kind) + "/" + id.Name
}

// FrontDoor is the front door's identity: the one service that proves
// agents, and so the one whose statements about an agent (its Agent-ID,
// key fingerprint, scopes) other services take.
var FrontDoor = Identity{Kind: Service, Name: "frontdoor"}

// IsZero reports whether the identity is the absence of one.
func (id Identity) IsZero() bool { return id.Kind == "" }

// nameSyntax keeps names to what is safe in a URI path segment, a log
// line and a table: lower-case letters, digits, dots, dashes and
// underscores, starting with a letter or digit.
var nameSyntax = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,62}$`)

// ParseIdentity reads kind/name.
func ParseIdentity(s string) (Identity, error) {
	kind, name, ok := strings.Cut(s, "/")
	if !ok {
		return Identity{}, fmt.Errorf("identity %q is not kind/name", s)
	}
	switch Kind(kind) {
	case Service, Operator, System:
	default:
		return Identity{}, fmt.Errorf("identity %q: kind %q is not service, operator or system", s, kind)
	}
	if !nameSyntax.MatchString(name) {
		return Identity{}, fmt.Errorf("identity %q: the name must be 1-63 lower-case letters, digits, dots, dashes or underscores", s)
	}
	return Identity{Kind: Kind(kind), Name: name}, nil
}

// DefaultTrustDomain is the SPIFFE trust domain of the suite's own
// identities when none is configured.
const DefaultTrustDomain = "agtp.internal"

// SPIFFEID is the URI SAN that names id in the trust domain:
// spiffe://<trust domain>/<kind>/<name>.
func SPIFFEID(trustDomain string, id Identity) string {
	return "spiffe://" + trustDomain + "/" + string(id.Kind) + "/" + id.Name
}

// Recognizer reads identities from verified client certificates.
type Recognizer struct {
	trustDomain string
	// names maps an external name (a URI SAN such as another trust
	// domain's SPIFFE ID, or "dns:" and a DNS SAN) to an identity.
	names map[string]Identity
}

// NewRecognizer recognises the suite's own SPIFFE IDs in trustDomain, and
// the external names of mapping ("spiffe://..." or another URI, or
// "dns:<name>") as the identities they map to ("kind/name").
func NewRecognizer(trustDomain string, mapping map[string]string) (*Recognizer, error) {
	if trustDomain == "" {
		trustDomain = DefaultTrustDomain
	}
	if !trustDomainSyntax.MatchString(trustDomain) {
		return nil, fmt.Errorf("trust domain %q: lower-case letters, digits, dots, dashes and underscores only", trustDomain)
	}
	r := &Recognizer{trustDomain: trustDomain, names: make(map[string]Identity, len(mapping))}
	var errs []error
	for name, target := range mapping {
		id, err := ParseIdentity(target)
		if err != nil {
			errs = append(errs, fmt.Errorf("identity map %q: %w", name, err))
			continue
		}
		if !strings.HasPrefix(name, "dns:") {
			u, err := url.Parse(name)
			if err != nil || u.Scheme == "" {
				errs = append(errs, fmt.Errorf("identity map %q: not a URI SAN or dns:<name>", name))
				continue
			}
			if u.Scheme == "agtp" {
				errs = append(errs, fmt.Errorf("identity map %q: an Agent-ID is never an internal identity", name))
				continue
			}
		}
		r.names[name] = id
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return r, nil
}

var trustDomainSyntax = regexp.MustCompile(`^[a-z0-9._-]{1,255}$`)

// TrustDomain is the trust domain of the suite's own SPIFFE IDs.
func (r *Recognizer) TrustDomain() string { return r.trustDomain }

// Identify returns the identity of a certificate that the TLS handshake
// has verified against the suite CA. A certificate names at most one
// identity: one naming none, two different ones, or an Agent-ID gets the
// zero Identity, which no table allows.
// IdentifyRequest is the identity of an HTTPS client, as the certificate
// chain its TLS handshake verified names it; none without one.
func (r *Recognizer) IdentifyRequest(req *http.Request) Identity {
	if req.TLS == nil || len(req.TLS.VerifiedChains) == 0 || len(req.TLS.VerifiedChains[0]) == 0 {
		return Identity{}
	}
	return r.Identify(req.TLS.VerifiedChains[0][0])
}

func (r *Recognizer) Identify(cert *x509.Certificate) Identity {
	if cert == nil {
		return Identity{}
	}
	var found Identity
	add := func(id Identity) bool {
		if found.IsZero() {
			found = id
			return true
		}
		return found == id
	}
	for _, u := range cert.URIs {
		if u.Scheme == "agtp" {
			return Identity{}
		}
		s := u.String()
		if id, ok := r.names[s]; ok {
			if !add(id) {
				return Identity{}
			}
			continue
		}
		if id, ok := r.own(u); ok && !add(id) {
			return Identity{}
		}
	}
	for _, d := range cert.DNSNames {
		if id, ok := r.names["dns:"+d]; ok && !add(id) {
			return Identity{}
		}
	}
	return found
}

// own reads spiffe://<trust domain>/<kind>/<name>.
func (r *Recognizer) own(u *url.URL) (Identity, bool) {
	if u.Scheme != "spiffe" || u.Host != r.trustDomain || u.RawQuery != "" || u.Fragment != "" || u.User != nil {
		return Identity{}, false
	}
	id, err := ParseIdentity(strings.TrimPrefix(u.Path, "/"))
	if err != nil {
		return Identity{}, false
	}
	return id, true
}

// LoadMapping reads an identity map file: a JSON object from external
// names to identities, for example
//
//	{"spiffe://corp.example/ns/ops/sa/deployer": "operator/deployer",
//	 "dns:billing.corp.example": "system/billing"}
func LoadMapping(path string) (map[string]string, error) {
	if path == "" {
		return nil, nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("identity map: %w", err)
	}
	var m map[string]string
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("identity map %s: %w", path, err)
	}
	return m, nil
}
