package client

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"

	"github.com/agtpsuite/agtp/auditsvc/attribution"
	"github.com/agtpsuite/agtp/services/agtp"
	"github.com/agtpsuite/agtp/services/outbound"
)

// Attribution verification failures, for errors.Is. Signature failures
// wrap the auditsvc/attribution errors (attribution.ErrBadSignature,
// ErrUnknownKey, ErrAlgorithmRefused, ErrMalformed).
var (
	// ErrNoAttribution: the response has no Attribution-Record field.
	ErrNoAttribution = errors.New("agtp client: response carries no Attribution-Record")
	// ErrAuditIDMismatch: Audit-ID is missing, or is not the lowercase
	// hex SHA-256 of the Attribution-Record (core §5.5.4).
	ErrAuditIDMismatch = errors.New("agtp client: Audit-ID does not match the Attribution-Record")
	// ErrRecordMismatch: the record verifies but describes another
	// response (status, Response-ID or result hash differ).
	ErrRecordMismatch = errors.New("agtp client: Attribution-Record does not describe this response")
)

// AttributionOptions configure VerifyAttributionWith.
type AttributionOptions struct {
	// Keys resolve the record's kid: attribution.PublicKeys from
	// FetchJWKS or attribution.ParseJWKS, or an *attribution.KeySet.
	Keys attribution.KeyResolver
	// AllowUnsigned accepts alg "none" records. Such a record carries no
	// anti-forgery claim and is never authoritative (core §10.4.9); a
	// server with a signing key never writes one.
	AllowUnsigned bool
}

// VerifyAttribution checks the Attribution-Record of resp: Audit-ID must
// be the lowercase hex SHA-256 of the JWS, the JWS must be EdDSA-signed
// by a key keys knows (alg none is refused), and the signed payload must
// describe resp: same status, same Response-ID and, when the payload
// has result_hash, the SHA-256 of resp's body. It returns the verified
// record.
//
// The JWS rules are those of auditsvc/attribution, which the server
// side signs with, so both ends agree on one implementation.
func VerifyAttribution(resp *agtp.Response, keys attribution.KeyResolver) (*attribution.Record, error) {
	return VerifyAttributionWith(resp, AttributionOptions{Keys: keys})
}

// VerifyAttributionWith is VerifyAttribution with options.
func VerifyAttributionWith(resp *agtp.Response, opts AttributionOptions) (*attribution.Record, error) {
	jws := resp.Header.Get(agtp.HeaderAttributionRecord)
	if jws == "" {
		return nil, ErrNoAttribution
	}
	id, ok := resp.Header.Lookup(agtp.HeaderAuditID)
	if !ok {
		return nil, fmt.Errorf("%w: the response has no Audit-ID", ErrAuditIDMismatch)
	}
	if want := attribution.AuditID(jws); id != want {
		return nil, fmt.Errorf("%w: Audit-ID %s, SHA-256 of the record %s", ErrAuditIDMismatch, id, want)
	}
	algs := []string{attribution.AlgEdDSA}
	if opts.AllowUnsigned {
		algs = append(algs, attribution.AlgNone)
	}
	keys := opts.Keys
	if keys == nil {
		keys = attribution.PublicKeys{}
	}
	rec, err := attribution.Verify(jws, attribution.VerifyOptions{Keys: keys, Algorithms: algs})
	if err != nil {
		return nil, fmt.Errorf("agtp client: Attribution-Record: %w", err)
	}
	// The record must be this response's: the suite signs other records
	// with the same key (lifecycle events, signed streams, checkpoints),
	// which carry none of these, so each is required, not only compared
	// when present.
	p := &rec.Payload
	if p.AuditRecordVersion != attribution.RecordVersion {
		return nil, fmt.Errorf("%w: audit_record_version %q", ErrRecordMismatch, p.AuditRecordVersion)
	}
	if p.Status != resp.Status {
		return nil, fmt.Errorf("%w: record status %d, response status %d", ErrRecordMismatch, p.Status, resp.Status)
	}
	if rid := resp.Header.Get(agtp.HeaderResponseID); p.ResponseID == "" || rid != p.ResponseID {
		return nil, fmt.Errorf("%w: record response_id %q, Response-ID %q", ErrRecordMismatch, p.ResponseID, rid)
	}
	sum := sha256.Sum256(resp.Body)
	if got := hex.EncodeToString(sum[:]); got != p.ResultHash {
		return nil, fmt.Errorf("%w: record result_hash %q, body hashes to %s", ErrRecordMismatch, p.ResultHash, got)
	}
	return rec, nil
}

// MaxJWKSBytes bounds a JWKS document fetched by FetchJWKS.
const MaxJWKSBytes = 1 << 20

// FetchJWKS fetches the JWKS at rawURL (https only) with the Client's TLS
// settings (roots, client certificate, InsecureSkipVerify), so that the
// suite CA that verifies the AGTP port verifies the HTTPS one too. The
// front door publishes its signing keys at
// https://{host}:{https-port}/.well-known/jwks.json.
func (c *Client) FetchJWKS(ctx context.Context, rawURL string) (attribution.PublicKeys, error) {
	cfg := c.tls.Clone()
	cfg.NextProtos = nil // HTTP/1.1 or h2, as the server likes; not "agtp"
	cfg.ClientSessionCache = nil
	// This is HTTPS, not AGTP: TLS 1.2 is acceptable there, and
	// well-known documents are often served by a separate web tier.
	cfg.MinVersion = tls.VersionTLS12
	if c.opts.ServerName == "" {
		cfg.ServerName = "" // net/http fills in the URL's host
	}
	// No proxy (Proxy is nil): the environment is the caller's business.
	tr := &http.Transport{TLSClientConfig: cfg, ForceAttemptHTTP2: true, TLSHandshakeTimeout: c.opts.HandshakeTimeout}
	defer tr.CloseIdleConnections()
	return FetchJWKS(ctx, &http.Client{Transport: tr}, rawURL)
}

// FetchJWKS GETs the JWKS at rawURL (https only) with hc and returns its
// Ed25519 keys by kid (attribution.ParseJWKS: a key whose kid is not its
// RFC 7638 thumbprint is refused). A redirect is followed only to another
// https URL (then hc's own CheckRedirect, if any, decides), at most 10:
// keys fetched over plain HTTP could be anyone's.
func FetchJWKS(ctx context.Context, hc *http.Client, rawURL string) (attribution.PublicKeys, error) {
	hc = outbound.HTTPSRedirectsOnly(hc)
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("agtp client: JWKS URL: %w", err)
	}
	if u.Scheme != "https" {
		return nil, fmt.Errorf("agtp client: JWKS URL %q: only https is accepted, since the keys vouch for every record", rawURL)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, fmt.Errorf("agtp client: JWKS request: %w", err)
	}
	req.Header.Set("Accept", "application/jwk-set+json, application/json")
	resp, err := hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("agtp client: fetch JWKS: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("agtp client: fetch JWKS from %s: HTTP %d %s", rawURL, resp.StatusCode, http.StatusText(resp.StatusCode))
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, MaxJWKSBytes+1))
	if err != nil {
		return nil, fmt.Errorf("agtp client: fetch JWKS: %w", err)
	}
	if len(body) > MaxJWKSBytes {
		return nil, fmt.Errorf("agtp client: JWKS from %s is larger than %d bytes", rawURL, MaxJWKSBytes)
	}
	keys, err := attribution.ParseJWKS(body)
	if err != nil {
		return nil, fmt.Errorf("agtp client: JWKS from %s: %w", rawURL, err)
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("agtp client: JWKS from %s holds no Ed25519 key", rawURL)
	}
	return keys, nil
}
