package attribution

import (
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"unsafe"

	jose "github.com/go-jose/go-jose/v4"

	"github.com/agtpsuite/agtp/services/edsign"
)

// AuditID is the Audit-ID of a record: lowercase hex SHA-256 of the exact
// JWS Compact string (core §5.5.4).
func AuditID(jws string) string {
	return hexAuditID(sha256.Sum256([]byte(jws)))
}

// hexAuditID is the hex form of a record's SHA-256, built on the stack so that
// the string is the only allocation.
func hexAuditID(sum [sha256.Size]byte) string {
	var out [2 * sha256.Size]byte
	hex.Encode(out[:], sum[:])
	return string(out[:])
}

var b64 = base64.RawURLEncoding

// noneHeader is the protected header of an unsigned record.
var noneHeader = b64.EncodeToString([]byte(`{"alg":"none"}`))

// Signer produces compact JWS records with one Ed25519 key, or alg none
// when it has no key. It is safe for concurrent use.
//
// The protected header is {"alg":"EdDSA","kid":<RFC 7638 thumbprint>},
// serialized exactly as go-jose serializes it; the header is encoded once
// and the per-record work is one base64 pass and one Ed25519 signature,
// made with the key expanded once (services/edsign).
// TestSignerMatchesGoJose pins the output byte-for-byte to go-jose's.
type Signer struct {
	key    *edsign.Key // nil for alg none
	kid    string
	header string // base64url protected header
}

// NewSigner returns a signer for key; a nil key gives an alg-none signer.
// It panics if key is not nil and not an Ed25519 private key.
func NewSigner(key ed25519.PrivateKey) *Signer {
	if key == nil {
		return &Signer{header: noneHeader}
	}
	expanded, err := edsign.NewKey(key)
	if err != nil {
		panic("attribution: NewSigner: " + err.Error())
	}
	kid, err := KeyID(expanded.Public())
	if err != nil {
		panic(err)
	}
	hdr, _ := json.Marshal(struct {
		Alg string `json:"alg"`
		Kid string `json:"kid"`
	}{AlgEdDSA, kid})
	return &Signer{key: expanded, kid: kid, header: b64.EncodeToString(hdr)}
}

// Alg is the JWS alg this signer writes.
func (s *Signer) Alg() string {
	if s.key == nil {
		return AlgNone
	}
	return AlgEdDSA
}

// KID is the kid this signer writes ("" for alg none).
func (s *Signer) KID() string { return s.kid }

// Sign returns the compact JWS over payload. An alg-none record ends with
// "." (empty signature).
func (s *Signer) Sign(payload []byte) string {
	return string(s.sign(payload))
}

// sign is Sign's compact JWS as bytes, so that SignPayload hashes the
// record without copying it to a string first.
func (s *Signer) sign(payload []byte) []byte { return s.signWith(s.header, payload) }

// signTyped signs payload under a protected header that also names typ,
// so that the JWS cannot be taken for a record (RFC 8725 §3.11).
func (s *Signer) signTyped(typ string, payload []byte) string {
	hdr, _ := json.Marshal(struct {
		Alg string `json:"alg"`
		Kid string `json:"kid,omitempty"`
		Typ string `json:"typ"`
	}{s.Alg(), s.kid, typ})
	return string(s.signWith(b64.EncodeToString(hdr), payload))
}

// signWith is the compact JWS over header (base64url) and payload.
func (s *Signer) signWith(header string, payload []byte) []byte {
	n := len(header) + 1 + b64.EncodedLen(len(payload)) + 1
	if s.key != nil {
		n += b64.EncodedLen(ed25519.SignatureSize)
	}
	buf := make([]byte, 0, n)
	buf = append(buf, header...)
	buf = append(buf, '.')
	buf = b64.AppendEncode(buf, payload)
	if s.key != nil {
		sig := s.key.Sign(buf)
		buf = append(buf, '.')
		buf = b64.AppendEncode(buf, sig[:])
	} else {
		buf = append(buf, '.')
	}
	return buf
}

// SignPayload marshals p, signs it and returns the JWS and its Audit-ID.
func (s *Signer) SignPayload(p *Payload) (jws, auditID string, err error) {
	bp := payloadBuffers.Get().(*[]byte)
	defer payloadBuffers.Put(bp)
	body, err := p.appendJSON((*bp)[:0]) // not json.Marshal: that would re-compact the output
	if err != nil {
		return "", "", fmt.Errorf("attribution: marshal payload: %w", err)
	}
	*bp = body
	buf := s.sign(body)
	// buf is the record's own bytes, never written again: the JWS string
	// shares them instead of copying a kilobyte per record.
	return unsafe.String(unsafe.SliceData(buf), len(buf)), hexAuditID(sha256.Sum256(buf)), nil
}

// payloadBuffers hold the payload JSON while it is signed; the JWS carries
// it base64url-encoded, so the JSON itself is scratch.
var payloadBuffers = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}

// signWithGoJose and verifyWithGoJose are the reference implementations
// Sign and Verify are checked against in tests.
func signWithGoJose(key ed25519.PrivateKey, kid string, payload []byte) (string, error) {
	sg, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.EdDSA, Key: jose.JSONWebKey{Key: key, KeyID: kid}}, nil)
	if err != nil {
		return "", err
	}
	obj, err := sg.Sign(payload)
	if err != nil {
		return "", err
	}
	return obj.CompactSerialize()
}

func verifyWithGoJose(jws string, pub ed25519.PublicKey) ([]byte, error) {
	obj, err := jose.ParseSignedCompact(jws, []jose.SignatureAlgorithm{jose.EdDSA})
	if err != nil {
		return nil, err
	}
	return obj.Verify(pub)
}

// Verification failures. Verify wraps one of these, so callers can tell a
// tampered record from a refused algorithm with errors.Is.
var (
	ErrMalformed        = errors.New("malformed record")
	ErrAlgorithmRefused = errors.New("algorithm not allowed")
	ErrUnknownKey       = errors.New("unknown signing key")
	ErrBadSignature     = errors.New("signature does not verify")
)

// VerifyOptions says which records Verify accepts.
type VerifyOptions struct {
	// Keys resolves kid to a public key (a *KeySet, or PublicKeys from
	// ParseJWKS).
	Keys KeyResolver
	// Algorithms are the accepted alg values; empty means {"EdDSA"}.
	// alg none is accepted only if "none" is listed: an unsigned record
	// carries no anti-forgery claim (core §10.4.9).
	Algorithms []string
}

// Record is a parsed Attribution-Record (or other signed record).
type Record struct {
	JWS     string
	AuditID string
	Alg     string
	KID     string
	// Typ is the protected header's typ: empty on records, CheckpointType
	// on chain checkpoints.
	Typ        string
	RawPayload []byte
	Payload    Payload
}

// Parse splits and decodes a record without checking its signature. Its
// result is not to be trusted; use Verify for that.
func Parse(jws string) (*Record, error) {
	parts := strings.Split(jws, ".")
	if len(parts) != 3 {
		return nil, fmt.Errorf("%w: want 3 dot-separated segments, got %d", ErrMalformed, len(parts))
	}
	hdrBytes, err := b64.DecodeString(parts[0])
	if err != nil {
		return nil, fmt.Errorf("%w: protected header: %v", ErrMalformed, err)
	}
	var hdr map[string]json.RawMessage
	if err := json.Unmarshal(hdrBytes, &hdr); err != nil || hdr == nil {
		return nil, fmt.Errorf("%w: protected header is not a JSON object", ErrMalformed)
	}
	r := &Record{JWS: jws, AuditID: AuditID(jws)}
	for name, v := range hdr {
		switch name {
		case "alg":
			if err := json.Unmarshal(v, &r.Alg); err != nil {
				return nil, fmt.Errorf("%w: alg: %v", ErrMalformed, err)
			}
		case "kid":
			if err := json.Unmarshal(v, &r.KID); err != nil {
				return nil, fmt.Errorf("%w: kid: %v", ErrMalformed, err)
			}
		case "typ":
			if err := json.Unmarshal(v, &r.Typ); err != nil {
				return nil, fmt.Errorf("%w: typ: %v", ErrMalformed, err)
			}
		case "cty":
		default:
			// crit, b64, jwk, jku, x5u, x5c ...: nothing this format
			// needs, and each changes how a verifier must behave.
			return nil, fmt.Errorf("%w: unsupported protected header member %q", ErrMalformed, name)
		}
	}
	if r.Alg == "" {
		return nil, fmt.Errorf("%w: protected header has no alg", ErrMalformed)
	}
	r.RawPayload, err = b64.DecodeString(parts[1])
	if err != nil {
		return nil, fmt.Errorf("%w: payload: %v", ErrMalformed, err)
	}
	if err := json.Unmarshal(r.RawPayload, &r.Payload); err != nil {
		return nil, fmt.Errorf("%w: payload: %v", ErrMalformed, err)
	}
	if err := CheckNoDuplicateMembers(r.RawPayload); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	if r.Alg == AlgNone && parts[2] != "" {
		return nil, fmt.Errorf("%w: alg none with a non-empty signature", ErrMalformed)
	}
	return r, nil
}

// Verify parses a record and checks its signature against opts.Keys. The
// Audit-ID is computed from the exact input string. A chain checkpoint
// (typ CheckpointType) is signed with the same key but is not a record,
// and is refused.
func Verify(jws string, opts VerifyOptions) (*Record, error) {
	r, err := verifySignature(jws, opts)
	if err != nil {
		return nil, err
	}
	if r.Typ == CheckpointType {
		return nil, fmt.Errorf("%w: typ %q is a chain checkpoint, not a record", ErrMalformed, r.Typ)
	}
	return r, nil
}

// verifySignature is Verify whatever the JWS's typ: the checks every JWS
// signed with the audit key passes.
func verifySignature(jws string, opts VerifyOptions) (*Record, error) {
	r, err := Parse(jws)
	if err != nil {
		return nil, err
	}
	allowed := opts.Algorithms
	if len(allowed) == 0 {
		allowed = []string{AlgEdDSA}
	}
	if !slices.Contains(allowed, r.Alg) {
		return nil, fmt.Errorf("%w: %q", ErrAlgorithmRefused, r.Alg)
	}
	switch r.Alg {
	case AlgNone:
		return r, nil
	case AlgEdDSA:
	default:
		return nil, fmt.Errorf("%w: %q is not supported", ErrAlgorithmRefused, r.Alg)
	}
	if r.KID == "" {
		return nil, fmt.Errorf("%w: EdDSA record without kid", ErrMalformed)
	}
	if opts.Keys == nil {
		return nil, fmt.Errorf("%w: no verification keys", ErrUnknownKey)
	}
	pub, ok := opts.Keys.VerificationKey(r.KID)
	if !ok {
		return nil, fmt.Errorf("%w: kid %q", ErrUnknownKey, r.KID)
	}
	// Parse refused every header member (b64, crit) that would change
	// the signing input, so it is the first two segments as sent.
	dot := strings.LastIndexByte(jws, '.')
	sig, err := b64.DecodeString(jws[dot+1:])
	if err != nil || len(sig) != ed25519.SignatureSize {
		return nil, fmt.Errorf("%w: kid %q: signature is not 64 base64url bytes", ErrBadSignature, r.KID)
	}
	// The decoder ignores CR and LF and the unused low bits of the last
	// character, so other spellings of the same signature would verify
	// under other Audit-IDs: only the one encoding is accepted.
	if b64.EncodeToString(sig) != jws[dot+1:] {
		return nil, fmt.Errorf("%w: kid %q: signature is not in canonical base64url", ErrBadSignature, r.KID)
	}
	if !ed25519.Verify(pub, []byte(jws[:dot]), sig) {
		return nil, fmt.Errorf("%w: kid %q", ErrBadSignature, r.KID)
	}
	return r, nil
}
