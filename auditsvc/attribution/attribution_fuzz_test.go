package attribution

import (
	"bytes"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
)

// fuzzRecordKey is fixed so that committed corpus entries signed with it
// stay valid records.
func fuzzRecordKey() ed25519.PrivateKey {
	seed := make([]byte, ed25519.SeedSize)
	for i := range seed {
		seed[i] = byte(0x40 + i)
	}
	return ed25519.NewKeyFromSeed(seed)
}

// fuzzRecords signs a response record, a lifecycle event with unknown
// members and a Tier 2 record with nested values.
func fuzzRecords(tb testing.TB, s *Signer) []string {
	tb.Helper()
	payloads := []*Payload{
		{ServerID: "srv.example", Timestamp: "2026-05-01T10:00:00Z", RequestHash: strings.Repeat("a", 64),
			Status: 200, Method: "QUERY", AgentID: strings.Repeat("7f", 32), ResponseID: "resp-1",
			ResultHash: strings.Repeat("b", 64), PreviousAuditID: ZeroAuditID, AuditRecordVersion: RecordVersion,
			VerificationLevel: 2, VerifiedBy: "certificate", CertificateFingerprint: strings.Repeat("c", 64)},
		{ServerID: "srv.example", EventType: "agent-lifecycle-suspended", AgentID: strings.Repeat("7f", 32),
			PreviousAuditID: strings.Repeat("d", 64), AuditRecordVersion: RecordVersion,
			Extra: map[string]json.RawMessage{"reason": json.RawMessage(`"operator \"request\""`), "x-n": json.RawMessage(`[1, {"a":null}]`)}},
		{Method: "TRANSFER", Status: 263, FromPrincipal: "alice", ToPrincipal: "bob", ProcedureID: "p-1",
			RunInput:           json.RawMessage(`{"amount_cents":1200,"memo":"é\u2028"}`),
			PriorActions:       []PriorAction{{AgentID: "a", AuditID: strings.Repeat("e", 64), AgentURI: "agtp://" + strings.Repeat("7f", 32)}},
			AuditRecordVersion: RecordVersion, PreviousAuditID: ZeroAuditID},
	}
	var out []string
	for _, p := range payloads {
		jws, _, err := s.SignPayload(p)
		if err != nil {
			tb.Fatal(err)
		}
		out = append(out, jws)
	}
	return out
}

const b64Alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"

var verifyErrors = []error{ErrMalformed, ErrAlgorithmRefused, ErrUnknownKey, ErrBadSignature}

func isVerifyError(err error) bool {
	for _, e := range verifyErrors {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// FuzzVerify checks record verification against a fixed key set. Only a
// record the key signed verifies, byte for byte, so that its Audit-ID (the
// SHA-256 of the exact string) names one record; go-jose agrees with
// every record that verifies; and the payload of a record that parses
// survives a decode/encode round trip.
func FuzzVerify(f *testing.F) {
	key := fuzzRecordKey()
	ks, err := NewKeySet(key)
	if err != nil {
		f.Fatal(err)
	}
	signer := ks.Signer()
	records := fuzzRecords(f, signer)
	signed := map[string]bool{}
	for _, r := range records {
		if _, err := Verify(r, VerifyOptions{Keys: ks}); err != nil {
			f.Fatalf("a signed seed does not verify: %v", err)
		}
		signed[r] = true
		f.Add(r)
		parts := strings.Split(r, ".")
		f.Add(parts[0] + "." + parts[1] + ".")                                        // signature stripped
		f.Add(noneHeader + "." + parts[1] + ".")                                      // alg none
		f.Add(parts[0] + "." + parts[1] + "x." + parts[2])                            // payload grown
		f.Add(strings.ToUpper(parts[0][:1]) + r[1:])                                  // header case
		f.Add(parts[0] + "." + parts[1] + "." + parts[2][:43] + "\n" + parts[2][43:]) // line break
		// The last character carries 2 bits of the signature and 4 unused
		// ones: setting one spells the same signature differently.
		last := strings.IndexByte(b64Alphabet, parts[2][len(parts[2])-1])
		f.Add(parts[0] + "." + parts[1] + "." + parts[2][:len(parts[2])-1] + string(b64Alphabet[last|1]))
	}
	// A foreign key's record.
	f.Add(NewSigner(ed25519.NewKeyFromSeed(make([]byte, ed25519.SeedSize))).Sign([]byte(`{}`)))
	f.Add("")
	f.Add("..")
	pub := key.Public().(ed25519.PublicKey)

	f.Fuzz(func(t *testing.T, jws string) {
		rec, perr := Parse(jws)
		if perr != nil && !errors.Is(perr, ErrMalformed) {
			t.Fatalf("Parse error %v is not ErrMalformed", perr)
		}
		for _, opts := range []VerifyOptions{
			{Keys: ks},
			{Keys: ks.PublicKeys(), Algorithms: []string{AlgEdDSA, AlgNone}},
		} {
			got, err := Verify(jws, opts)
			if err != nil {
				if !isVerifyError(err) {
					t.Fatalf("Verify error %v wraps none of the sentinel errors", err)
				}
				continue
			}
			if perr != nil {
				t.Fatalf("Verify accepted what Parse refuses: %v", perr)
			}
			if got.JWS != jws || got.AuditID != AuditID(jws) || !IsAuditID(got.AuditID) {
				t.Fatal("the verified record does not carry its exact JWS and Audit-ID")
			}
			if got.Alg == AlgNone {
				if len(opts.Algorithms) == 0 || !strings.HasSuffix(jws, ".") {
					t.Fatalf("alg none accepted with options %+v: %q", opts, jws)
				}
				continue
			}
			if got.Alg != AlgEdDSA || got.KID != signer.KID() {
				t.Fatalf("verified a record with alg %q kid %q", got.Alg, got.KID)
			}
			if !signed[jws] {
				t.Fatalf("a record the key never signed verifies: %q", jws)
			}
			payload, err := verifyWithGoJose(jws, pub)
			if err != nil || !bytes.Equal(payload, got.RawPayload) {
				t.Fatalf("go-jose: %v, payload %q, ours %q", err, payload, got.RawPayload)
			}
		}
		if perr != nil {
			return
		}
		if rec.AuditID != AuditID(jws) || rec.Alg == "" {
			t.Fatalf("parsed record %+v", rec)
		}
		checkPayloadRoundTrip(t, rec.RawPayload, &rec.Payload)
	})
}

// checkPayloadRoundTrip checks that a decoded payload encodes, that the
// encoding decodes to the same payload and is a fixed point, and that it
// holds the same members with the same values as the original.
func checkPayloadRoundTrip(t *testing.T, raw []byte, p *Payload) {
	t.Helper()
	out, err := p.MarshalJSON()
	if err != nil {
		t.Fatalf("a decoded payload does not encode: %v", err)
	}
	var back Payload
	if err := json.Unmarshal(out, &back); err != nil {
		t.Fatalf("the encoded payload %s does not decode: %v", out, err)
	}
	if !reflect.DeepEqual(normalPayload(back), normalPayload(*p)) {
		t.Fatalf("payload changed in a round trip:\n %#v\n %#v", *p, back)
	}
	again, err := back.MarshalJSON()
	if err != nil || !bytes.Equal(again, out) {
		t.Fatalf("encoding is not a fixed point:\n %s\n %s, %v", out, again, err)
	}
	if err := CheckNoDuplicateMembers(out); err != nil {
		t.Fatalf("the encoded payload %s has duplicate members: %v", out, err)
	}
	// Members may lose zero values (omitempty) and be compacted, but
	// never gain or change one. prior_actions elements gain their empty
	// agent_id and audit_id; the Payload comparison above covers them.
	var in, enc map[string]any
	if err := json.Unmarshal(raw, &in); err != nil {
		t.Fatalf("decoded payload %s is not an object: %v", raw, err)
	}
	if err := json.Unmarshal(out, &enc); err != nil {
		t.Fatal(err)
	}
	for k, v := range enc {
		if k != "prior_actions" && !reflect.DeepEqual(in[k], v) {
			t.Fatalf("member %q was %#v, encoded as %#v", k, in[k], v)
		}
	}
}

// normalPayload puts the raw members in one spelling: a round trip
// compacts them, and json.Marshal escapes HTML characters in run_input
// but not in Extra. It also empties an empty prior_actions, as a round
// trip does.
func normalPayload(p Payload) Payload {
	if len(p.PriorActions) == 0 {
		p.PriorActions = nil
	}
	normal := func(r json.RawMessage) json.RawMessage {
		var v any
		if r == nil || json.Unmarshal(r, &v) != nil {
			return r
		}
		b, _ := json.Marshal(v)
		return b
	}
	p.RunInput = normal(p.RunInput)
	if p.Extra != nil {
		extra := make(map[string]json.RawMessage, len(p.Extra))
		for k, v := range p.Extra {
			extra[k] = normal(v)
		}
		p.Extra = extra
	}
	return p
}

// FuzzPayload checks the payload decoder on its own: a payload that
// decodes round-trips, and CheckNoDuplicateMembers refuses exactly the
// objects whose top-level names, counted by encoding/json's tokenizer,
// repeat or fold onto a named member.
func FuzzPayload(f *testing.F) {
	for _, r := range fuzzRecords(f, NewSigner(nil)) {
		p, err := b64.DecodeString(strings.Split(r, ".")[1])
		if err != nil {
			f.Fatal(err)
		}
		f.Add(p)
	}
	for _, s := range []string{
		`{"method":"A","method":"B"}`,
		`{"x":{"a":1,"b":[1,2]},"y":"a,\\\"}","x":2}`,
		`{"a":"}{,","b":{"a":1,"a":2}}`,
		` {"a" : [ {"b":1}, "c" ] } `,
		`{"Method":"QUERY"}`,
		`{"status":"200"}`,
		`{"run_input":null}`,
		`null`,
		`[1]`,
		`{}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if json.Valid(data) {
			var raw map[string]json.RawMessage
			if json.Unmarshal(data, &raw) == nil {
				names, ok := tokenMemberNames(data)
				ambiguous := names != len(raw)
				for k := range raw {
					for m := range knownMembers {
						ambiguous = ambiguous || k != m && strings.EqualFold(k, m)
					}
				}
				dupErr := CheckNoDuplicateMembers(data)
				if ok && (dupErr == nil) == ambiguous {
					t.Fatalf("CheckNoDuplicateMembers = %v with %d names, %d distinct: %s", dupErr, names, len(raw), data)
				}
			}
		}
		var p Payload
		if err := json.Unmarshal(data, &p); err != nil {
			return
		}
		if CheckNoDuplicateMembers(data) != nil {
			return
		}
		checkPayloadRoundTrip(t, data, &p)
	})
}

// tokenMemberNames counts the member names of a top-level JSON object
// with encoding/json's tokenizer.
func tokenMemberNames(data []byte) (int, bool) {
	dec := json.NewDecoder(bytes.NewReader(data))
	tok, err := dec.Token()
	if err != nil || tok != json.Delim('{') {
		return 0, false
	}
	n := 0
	for dec.More() {
		if _, err := dec.Token(); err != nil {
			return 0, false
		}
		n++
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return 0, false
		}
	}
	return n, true
}

// FuzzPayloadEncoding checks the payload encoder against encoding/json,
// byte for byte: every named member is set (so a member added to Payload
// and not to appendNamed fails at once), from strings that need no escape
// and from ones that do.
func FuzzPayloadEncoding(f *testing.F) {
	f.Add("srv.example", "2026-05-01T10:00:00Z", strings.Repeat("7f", 32), 200, true)
	f.Add("a\"b\\c", "<script>&amp;", "\u2028\u2029 é \x00\x1f", -1, false)
	f.Add("\xff\xfe invalid", "tab\there", "", 0, true)
	f.Add("", "", "", 0, false)
	f.Fuzz(func(t *testing.T, a, b, c string, n int, prior bool) {
		var p Payload
		v := reflect.ValueOf(&p).Elem()
		in := []string{a, b, c}
		for i := range v.NumField() {
			switch fv := v.Field(i); fv.Kind() {
			case reflect.String:
				fv.SetString(in[i%len(in)])
			case reflect.Int:
				fv.SetInt(int64(n + i))
			}
		}
		if prior {
			p.PriorActions = []PriorAction{{AgentID: a, AuditID: b}, {AgentID: c, AuditID: a, AgentURI: b}}
		}
		want, err := json.Marshal((*payloadFields)(&p))
		if err != nil {
			t.Fatal(err)
		}
		got, ok := p.appendNamed(nil)
		if !ok {
			t.Fatal("appendNamed refused a payload without run_input")
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("appendNamed:\n%s\nencoding/json:\n%s", got, want)
		}
		p.RunInput = json.RawMessage(`{"a": [1, "<"]}`)
		if _, ok := p.appendNamed(nil); ok {
			t.Fatal("appendNamed encoded run_input itself")
		}
		whole, err := p.MarshalJSON()
		if want, _ := json.Marshal((*payloadFields)(&p)); err != nil || !bytes.Equal(whole, want) {
			t.Fatalf("MarshalJSON with run_input = %s, %v; encoding/json: %s", whole, err, want)
		}
	})
}
