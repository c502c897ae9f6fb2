package attribution

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	jose "github.com/go-jose/go-jose/v4"
)

func newKey(t testing.TB) ed25519.PrivateKey {
	t.Helper()
	_, k, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func samplePayload(prev string) *Payload {
	return &Payload{
		ServerID: "srv.example", Timestamp: "2026-05-01T10:00:00Z", RequestHash: strings.Repeat("a", 64),
		Status: 200, Method: "QUERY", AgentID: "agent-1", OwnerID: "owner-1", TaskID: "task-1",
		RequestID: "req-1", ResponseID: "resp-1", ResultHash: strings.Repeat("b", 64),
		PreviousAuditID: prev, AuditRecordVersion: RecordVersion,
	}
}

// RFC 8037 Appendix A.3: the thumbprint of the example Ed25519 key.
func TestKeyIDIsRFC7638Thumbprint(t *testing.T) {
	x, _ := base64.RawURLEncoding.DecodeString("11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo")
	kid, err := KeyID(ed25519.PublicKey(x))
	if err != nil {
		t.Fatal(err)
	}
	if want := "kPrK_qmxVWaYVA9wwBF6Iuo3vVzz7TxHCTwXBygrS4k"; kid != want {
		t.Fatalf("kid = %s, want %s", kid, want)
	}
}

func TestSignerMatchesGoJose(t *testing.T) {
	key := newKey(t)
	s := NewSigner(key)
	for _, payload := range [][]byte{[]byte(`{}`), []byte(`{"a":"b"}`), bytes.Repeat([]byte("x"), 1001)} {
		got := s.Sign(payload)
		want, err := signWithGoJose(key, s.KID(), payload)
		if err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Fatalf("Sign differs from go-jose:\n got %s\nwant %s", got, want)
		}
		verified, err := verifyWithGoJose(got, key.Public().(ed25519.PublicKey))
		if err != nil || !bytes.Equal(verified, payload) {
			t.Fatalf("go-jose does not verify the record: %v", err)
		}
	}
}

func TestSignedRecordHeaderHasEdDSAAndKid(t *testing.T) {
	key := newKey(t)
	s := NewSigner(key)
	jws, id, err := s.SignPayload(samplePayload(ZeroAuditID))
	if err != nil {
		t.Fatal(err)
	}
	hdr, _ := base64.RawURLEncoding.DecodeString(strings.Split(jws, ".")[0])
	var h map[string]string
	if err := json.Unmarshal(hdr, &h); err != nil {
		t.Fatal(err)
	}
	if h["alg"] != "EdDSA" || h["kid"] != s.KID() || len(h) != 2 {
		t.Fatalf("header = %v", h)
	}
	sum := sha256.Sum256([]byte(jws))
	if id != hex.EncodeToString(sum[:]) || !IsAuditID(id) {
		t.Fatalf("audit id %s is not sha256 of the JWS", id)
	}
}

func TestAlgNoneOnlyWithoutKeyAndOnlyWhenAllowed(t *testing.T) {
	s := NewSigner(nil)
	if s.Alg() != AlgNone {
		t.Fatalf("alg = %s", s.Alg())
	}
	jws, _, err := s.SignPayload(samplePayload(ZeroAuditID))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(jws, ".") || strings.Count(jws, ".") != 2 {
		t.Fatalf("alg none record %q must end with an empty signature", jws)
	}
	if _, err := Verify(jws, VerifyOptions{}); !errors.Is(err, ErrAlgorithmRefused) {
		t.Fatalf("default Verify accepted alg none: %v", err)
	}
	rec, err := Verify(jws, VerifyOptions{Algorithms: []string{AlgEdDSA, AlgNone}})
	if err != nil {
		t.Fatalf("explicitly allowed alg none refused: %v", err)
	}
	if rec.Payload.Method != "QUERY" {
		t.Fatalf("payload = %+v", rec.Payload)
	}
	// A "none" record with a signature segment is malformed.
	if _, err := Verify(jws+"AAAA", VerifyOptions{Algorithms: []string{AlgNone}}); !errors.Is(err, ErrMalformed) {
		t.Fatalf("alg none with signature: %v", err)
	}
}

func TestVerifyRefusesTamperedOrForeignRecords(t *testing.T) {
	key := newKey(t)
	ks, err := NewKeySet(key)
	if err != nil {
		t.Fatal(err)
	}
	s := ks.Signer()
	jws, _, _ := s.SignPayload(samplePayload(ZeroAuditID))
	parts := strings.Split(jws, ".")
	otherPayload, _ := json.Marshal(samplePayload(strings.Repeat("1", 64)))
	hdr := func(h string) string { return base64.RawURLEncoding.EncodeToString([]byte(h)) }
	other := NewSigner(newKey(t)).Sign([]byte(`{"a":1}`))

	cases := []struct {
		name string
		jws  string
		want error
	}{
		{"payload-swapped", parts[0] + "." + base64.RawURLEncoding.EncodeToString(otherPayload) + "." + parts[2], ErrBadSignature},
		{"signature-flipped", parts[0] + "." + parts[1] + "." + flip(parts[2]), ErrBadSignature},
		{"unknown-kid", other, ErrUnknownKey},
		{"crit-header", hdr(`{"alg":"EdDSA","kid":"`+s.KID()+`","crit":["b64"],"b64":false}`) + "." + parts[1] + "." + parts[2], ErrMalformed},
		{"hs256", hdr(`{"alg":"HS256","kid":"`+s.KID()+`"}`) + "." + parts[1] + "." + parts[2], ErrAlgorithmRefused},
		{"no-kid", hdr(`{"alg":"EdDSA"}`) + "." + parts[1] + "." + parts[2], ErrMalformed},
		{"two-segments", parts[0] + "." + parts[1], ErrMalformed},
		{"none-downgrade", hdr(`{"alg":"none"}`) + "." + parts[1] + ".", ErrAlgorithmRefused},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := Verify(tc.jws, VerifyOptions{Keys: ks}); !errors.Is(err, tc.want) {
				t.Fatalf("Verify = %v, want %v", err, tc.want)
			}
			if _, err := verifyWithGoJose(tc.jws, key.Public().(ed25519.PublicKey)); err == nil {
				t.Fatal("go-jose accepts what Verify refuses; the two disagree")
			}
		})
	}
	if _, err := Verify(jws, VerifyOptions{Keys: ks}); err != nil {
		t.Fatalf("untampered record: %v", err)
	}
}

func flip(sig string) string {
	b, _ := base64.RawURLEncoding.DecodeString(sig)
	b[0] ^= 1
	return base64.RawURLEncoding.EncodeToString(b)
}

func TestRotatedOutKeysStillVerifyAndArePublished(t *testing.T) {
	oldKey, newKeyV := newKey(t), newKey(t)
	oldSet, _ := NewKeySet(oldKey)
	oldJWS, _, _ := oldSet.Signer().SignPayload(samplePayload(ZeroAuditID))

	rotated, err := NewKeySet(newKeyV, oldKey.Public())
	if err != nil {
		t.Fatal(err)
	}
	if rotated.ActiveKID() == oldSet.ActiveKID() {
		t.Fatal("rotation kept the old kid")
	}
	if _, err := Verify(oldJWS, VerifyOptions{Keys: rotated}); err != nil {
		t.Fatalf("old record after rotation: %v", err)
	}
	jwks, err := rotated.JWKS()
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(jwks, []byte(`"d"`)) {
		t.Fatalf("JWKS leaks private key material: %s", jwks)
	}
	pub, err := ParseJWKS(jwks)
	if err != nil {
		t.Fatal(err)
	}
	if len(pub) != 2 {
		t.Fatalf("JWKS has %d keys, want 2", len(pub))
	}
	if _, err := Verify(oldJWS, VerifyOptions{Keys: pub}); err != nil {
		t.Fatalf("old record against published JWKS: %v", err)
	}
	newJWS, _, _ := rotated.Signer().SignPayload(samplePayload(ZeroAuditID))
	if _, err := Verify(newJWS, VerifyOptions{Keys: pub}); err != nil {
		t.Fatalf("new record against published JWKS: %v", err)
	}
	var doc struct {
		Keys []map[string]string `json:"keys"`
	}
	_ = json.Unmarshal(jwks, &doc)
	if doc.Keys[0]["kid"] != rotated.ActiveKID() || doc.Keys[0]["alg"] != "EdDSA" || doc.Keys[0]["crv"] != "Ed25519" {
		t.Fatalf("first JWKS key = %v", doc.Keys[0])
	}
}

func TestParseJWKSRefusesKidThatIsNotTheThumbprint(t *testing.T) {
	k := newKey(t)
	doc, _ := json.Marshal(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: k.Public(), KeyID: "someone-elses-kid"}}})
	if _, err := ParseJWKS(doc); err == nil {
		t.Fatal("ParseJWKS accepted a kid that is not the key's thumbprint")
	}
}

func TestLoadKeyFileFormats(t *testing.T) {
	k := newKey(t)
	dir := t.TempDir()
	der, _ := x509.MarshalPKCS8PrivateKey(k)
	pubDER, _ := x509.MarshalPKIXPublicKey(k.Public())
	jwk, _ := json.Marshal(jose.JSONWebKey{Key: k})
	files := map[string][]byte{
		"priv.pem": pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}),
		"pub.pem":  pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pubDER}),
		"key.jwk":  jwk,
	}
	for name, data := range files {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	ks, err := LoadKeySet(filepath.Join(dir, "priv.pem"), filepath.Join(dir, "pub.pem"))
	if err != nil {
		t.Fatal(err)
	}
	want, _ := KeyID(k.Public().(ed25519.PublicKey))
	if ks.ActiveKID() != want || len(ks.PublicKeys()) != 1 {
		t.Fatalf("kid %s keys %d", ks.ActiveKID(), len(ks.PublicKeys()))
	}
	ks2, err := LoadKeySet(filepath.Join(dir, "key.jwk"))
	if err != nil || ks2.ActiveKID() != want {
		t.Fatalf("JWK private key: %v %s", err, ks2.ActiveKID())
	}
	if _, err := LoadKeySet(filepath.Join(dir, "pub.pem")); err == nil {
		t.Fatal("a public key was accepted as the signing key")
	}
}

func TestPayloadKeepsUnknownMembersAndRefusesAmbiguity(t *testing.T) {
	in := []byte(`{"method":"TRANSFER","status":200,"from_principal":"alice","custody":{"to":"bob"},"prior_actions":[{"agent_id":"a","audit_id":"b"}]}`)
	var p Payload
	if err := json.Unmarshal(in, &p); err != nil {
		t.Fatal(err)
	}
	if p.Method != "TRANSFER" || len(p.PriorActions) != 1 || p.FromPrincipal != "alice" || string(p.Extra["custody"]) != `{"to":"bob"}` {
		t.Fatalf("decoded %+v", p)
	}
	out, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	var a, b map[string]any
	_ = json.Unmarshal(in, &a)
	_ = json.Unmarshal(out, &b)
	if fmt.Sprint(a) != fmt.Sprint(b) {
		t.Fatalf("round trip changed members:\n in %s\nout %s", in, out)
	}
	for _, dup := range []string{`{"method":"A","method":"B"}`, `{"x":{"a":1,"b":[1,2]},"y":"a,\\\"}","x":2}`} {
		if err := CheckNoDuplicateMembers([]byte(dup)); err == nil {
			t.Fatalf("duplicate member accepted: %s", dup)
		}
		if _, err := Parse(NewSigner(nil).Sign([]byte(dup))); !errors.Is(err, ErrMalformed) {
			t.Fatalf("Parse accepted a payload with duplicate members: %v", err)
		}
	}
	for _, ok := range []string{`{}`, `{"a":"}{,","b":{"a":1,"a":2}}`, ` {"a" : [ {"b":1}, "c" ] } `} {
		if err := CheckNoDuplicateMembers([]byte(ok)); err != nil {
			t.Fatalf("%s: %v", ok, err)
		}
	}
	if err := json.Unmarshal([]byte(`null`), &p); err == nil {
		t.Fatal("null payload accepted")
	}
	if err := json.Unmarshal([]byte(`[1]`), &p); err == nil {
		t.Fatal("non-object payload accepted")
	}
	p = Payload{Extra: map[string]json.RawMessage{"method": []byte(`"X"`)}}
	if _, err := json.Marshal(p); err == nil {
		t.Fatal("extra member shadowing a named one was marshalled")
	}
}

// buildChain signs n linked records for agent.
func buildChain(t testing.TB, s *Signer, agent string, n int) []string {
	prev := ZeroAuditID
	out := make([]string, n)
	for i := range out {
		p := samplePayload(prev)
		p.AgentID = agent
		p.ResponseID = fmt.Sprint("resp-", i)
		jws, id, err := s.SignPayload(p)
		if err != nil {
			t.Fatal(err)
		}
		out[i], prev = jws, id
	}
	return out
}

func TestVerifyChainReportsFirstBreak(t *testing.T) {
	key := newKey(t)
	ks, _ := NewKeySet(key)
	s := ks.Signer()
	good := buildChain(t, s, "agent-1", 6)
	opts := ChainOptions{VerifyOptions: VerifyOptions{Keys: ks}, AgentID: "agent-1"}

	if r := VerifyChain(good, opts); !r.Valid || r.Checked != 6 || r.Head != AuditID(good[5]) {
		t.Fatalf("intact chain: %+v", r)
	}

	resigned := func(i int, mut func(*Payload)) []string {
		c := append([]string(nil), good...)
		rec, _ := Parse(c[i])
		mut(&rec.Payload)
		c[i], _, _ = s.SignPayload(&rec.Payload) // validly signed, but the next link breaks
		return c
	}
	cases := []struct {
		name    string
		chain   []string
		index   uint64
		problem string
	}{
		{"deleted-record", append(append([]string(nil), good[:2]...), good[3:]...), 2, ProblemBrokenLink},
		{"swapped-records", []string{good[0], good[2], good[1], good[3]}, 1, ProblemBrokenLink},
		{"re-signed-changed-status", resigned(3, func(p *Payload) { p.Status = 500 }), 4, ProblemBrokenLink},
		{"payload-edited-without-key", func() []string {
			c := append([]string(nil), good...)
			parts := strings.Split(c[2], ".")
			pl, _ := base64.RawURLEncoding.DecodeString(parts[1])
			pl = bytes.Replace(pl, []byte(`"status":200`), []byte(`"status":201`), 1)
			c[2] = parts[0] + "." + base64.RawURLEncoding.EncodeToString(pl) + "." + parts[2]
			return c
		}(), 2, ProblemBadSignature},
		{"foreign-agent", resigned(0, func(p *Payload) { p.AgentID = "agent-2" })[:1], 0, ProblemAgentMismatch},
		{"forked-first", append(resigned(0, func(p *Payload) { p.ResponseID = "fork" })[:1], good[1]), 1, ProblemBrokenLink},
		{"unsigned-record", func() []string {
			c := append([]string(nil), good...)
			rec, _ := Parse(c[4])
			c[4], _, _ = NewSigner(nil).SignPayload(&rec.Payload)
			return c
		}(), 4, ProblemAlgorithmRefused},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := VerifyChain(tc.chain, opts)
			if r.Valid || r.Break == nil {
				t.Fatalf("break not detected: %+v", r)
			}
			if r.Break.Index != tc.index || r.Break.Problem != tc.problem {
				t.Fatalf("break at %d (%s: %v), want %d (%s)", r.Break.Index, r.Break.Problem, r.Break.Err, tc.index, tc.problem)
			}
			checkParallelAgrees(t, tc.chain, opts, r)
		})
	}
	checkParallelAgrees(t, good, opts, VerifyChain(good, opts))
}

// checkParallelAgrees: signatures checked on a pool of workers, then
// added in order, give the result of the one-at-a-time check, break
// included.
func checkParallelAgrees(t *testing.T, chain []string, opts ChainOptions, want ChainResult) {
	t.Helper()
	for _, workers := range []int{1, 2, 3, 16} {
		v := NewChainVerifier(opts)
		for _, c := range CheckParallel(chain, nil, opts.VerifyOptions, workers) {
			if _, err := v.AddChecked(c); err != nil {
				break
			}
		}
		got := v.Result()
		if got.Valid != want.Valid || got.Checked != want.Checked || got.Head != want.Head || (got.Break == nil) != (want.Break == nil) ||
			got.Break != nil && (got.Break.Index != want.Break.Index || got.Break.Problem != want.Break.Problem || got.Break.AuditID != want.Break.AuditID) {
			t.Fatalf("%d workers: %+v (break %+v), want %+v (break %+v)", workers, got, got.Break, want, want.Break)
		}
	}
}

func TestChainVerifierChecksClaimedAuditID(t *testing.T) {
	ks, _ := NewKeySet(newKey(t))
	c := buildChain(t, ks.Signer(), "a", 2)
	v := NewChainVerifier(ChainOptions{VerifyOptions: VerifyOptions{Keys: ks}})
	if _, err := v.Add(c[0], AuditID(c[0])); err != nil {
		t.Fatal(err)
	}
	checks := CheckParallel(c, []string{AuditID(c[0]), AuditID(c[0])}, VerifyOptions{Keys: ks}, 2)
	if checks[0].Claimed != AuditID(c[0]) || checks[0].Err != nil || checks[1].Claimed != AuditID(c[0]) {
		t.Fatalf("CheckParallel = %+v", checks)
	}
	_, err := v.AddChecked(checks[1])
	var b *Break
	if !errors.As(err, &b) || b.Problem != ProblemAuditIDMismatch || b.Index != 1 {
		t.Fatalf("err = %v", err)
	}
}

func TestWalkBackDetectsSubstitutedRecord(t *testing.T) {
	ks, _ := NewKeySet(newKey(t))
	s := ks.Signer()
	c := buildChain(t, s, "a", 5)
	store := map[string]string{}
	for _, j := range c {
		store[AuditID(j)] = j
	}
	fetch := func(_ context.Context, id string) (string, error) {
		j, ok := store[id]
		if !ok {
			return "", errors.New("404")
		}
		return j, nil
	}
	opts := ChainOptions{VerifyOptions: VerifyOptions{Keys: ks}, AgentID: "a"}
	if r := WalkBack(context.Background(), AuditID(c[4]), fetch, opts, 0); !r.Valid || r.Checked != 5 {
		t.Fatalf("intact walk: %+v", r)
	}
	// The store answers with a different (validly signed) record for one id.
	store[AuditID(c[2])] = buildChain(t, s, "a", 1)[0]
	r := WalkBack(context.Background(), AuditID(c[4]), fetch, opts, 0)
	if r.Valid || r.Break.Index != 2 || r.Break.Problem != ProblemAuditIDMismatch {
		t.Fatalf("substitution: %+v", r)
	}
	if r := WalkBack(context.Background(), AuditID(c[4]), fetch, opts, 1); r.Valid || r.Break.Problem != ProblemTooLong {
		t.Fatalf("bounded walk: %+v", r)
	}
}

func TestVerifyEntriesFindsGapsAcrossFiles(t *testing.T) {
	ks, _ := NewKeySet(newKey(t))
	c := buildChain(t, ks.Signer(), "a", 4)
	var entries []Entry
	for i := len(c) - 1; i >= 0; i-- { // out of order, as from several files
		entries = append(entries, Entry{Format: "jws", Stream: StreamAttribution, Chain: "a", Sequence: uint64(i + 1), AuditID: AuditID(c[i]), JWS: c[i]})
	}
	var buf bytes.Buffer
	for _, e := range entries {
		b, _ := json.Marshal(e)
		buf.Write(append(b, '\n'))
	}
	var read []Entry
	if err := ReadEntries(&buf, func(e Entry) error { read = append(read, e); return nil }); err != nil {
		t.Fatal(err)
	}
	opts := ChainOptions{VerifyOptions: VerifyOptions{Keys: ks}}
	k := ChainKey{Stream: StreamAttribution, Chain: "a"}
	if r := VerifyEntries(read, opts, true)[k]; !r.Valid || r.Checked != 4 {
		t.Fatalf("complete export: %+v", r)
	}
	gap := append(append([]Entry(nil), read[:1]...), read[2:]...) // drop sequence 3
	if r := VerifyEntries(gap, opts, true)[k]; r.Valid || r.Break.Index != 2 {
		t.Fatalf("gap: %+v", r)
	}
}

func BenchmarkSign(b *testing.B) {
	s := NewSigner(newKey(b))
	p := samplePayload(ZeroAuditID)
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := s.SignPayload(p); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkSignGoJose(b *testing.B) {
	key := newKey(b)
	kid, _ := KeyID(key.Public().(ed25519.PublicKey))
	sg, _ := jose.NewSigner(jose.SigningKey{Algorithm: jose.EdDSA, Key: jose.JSONWebKey{Key: key, KeyID: kid}}, nil)
	p := samplePayload(ZeroAuditID)
	b.ReportAllocs()
	for b.Loop() {
		body, _ := json.Marshal(p)
		obj, err := sg.Sign(body)
		if err != nil {
			b.Fatal(err)
		}
		jws, _ := obj.CompactSerialize()
		_ = AuditID(jws)
	}
}

// BenchmarkCheckParallel checks the signatures of a batch of an export
// stream's size on one worker per CPU; records/s is the rate the CPUs
// give `agtp audit verify`.
func BenchmarkCheckParallel(b *testing.B) {
	ks, _ := NewKeySet(newKey(b))
	chain := buildChain(b, ks.Signer(), "agent-1", 256)
	for b.Loop() {
		for _, c := range CheckParallel(chain, nil, VerifyOptions{Keys: ks}, runtime.GOMAXPROCS(0)) {
			if c.Err != nil {
				b.Fatal(c.Err)
			}
		}
	}
	b.ReportMetric(float64(len(chain))*float64(b.N)/b.Elapsed().Seconds(), "records/s")
}

func BenchmarkVerify(b *testing.B) {
	ks, _ := NewKeySet(newKey(b))
	jws, _, _ := ks.Signer().SignPayload(samplePayload(ZeroAuditID))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Verify(jws, VerifyOptions{Keys: ks}); err != nil {
			b.Fatal(err)
		}
	}
}

// Every stream of an agent's chain holds only that agent's records, so an
// export's chain of another agent's records fails, whichever the stream.
func TestVerifyEntriesChecksTheAgentOnEveryStream(t *testing.T) {
	ks, err := NewKeySet(newKey(t))
	if err != nil {
		t.Fatal(err)
	}
	agentA, agentB := strings.Repeat("a", 64), strings.Repeat("b", 64)
	for _, stream := range []string{StreamAttribution, StreamLifecycle, "confirm"} {
		t.Run(stream, func(t *testing.T) {
			var entries []Entry
			prev := ZeroAuditID
			for i := range 3 {
				jws, id, err := ks.Signer().SignPayload(&Payload{ServerID: "s", Timestamp: "2026-01-01T00:00:00Z",
					AgentID: agentA, EventType: "agent-lifecycle-activated", PreviousAuditID: prev, AuditRecordVersion: RecordVersion})
				if err != nil {
					t.Fatal(err)
				}
				entries = append(entries, Entry{Format: "jws", Stream: stream, Chain: agentB, Sequence: uint64(i + 1), AuditID: id, JWS: jws})
				prev = id
			}
			r := VerifyEntries(entries, ChainOptions{VerifyOptions: VerifyOptions{Keys: ks}}, true)[ChainKey{Stream: stream, Chain: agentB}]
			if r.Valid || r.Break == nil || r.Break.Problem != ProblemAgentMismatch {
				t.Fatalf("agent A's records as agent B's %s chain: valid %v, break %+v", stream, r.Valid, r.Break)
			}
		})
	}
}
