package attribution

import (
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

// checkpointSigner is a signer and the options that verify what it signs.
func checkpointSigner(t *testing.T) (*Signer, VerifyOptions) {
	t.Helper()
	k := newKey(t)
	s := NewSigner(k)
	return s, VerifyOptions{Keys: PublicKeys{s.KID(): k.Public().(ed25519.PublicKey)}}
}

func sampleCheckpoint() Checkpoint {
	return Checkpoint{Version: CheckpointVersion, Stream: StreamAttribution, Chain: "agent-1", Sequence: 3,
		AuditID: strings.Repeat("c", 64), TrimmedAt: "2026-05-01T10:00:00Z"}
}

// A checkpoint and a record are signed with one key; the typ tells them
// apart both ways, and a checkpoint's payload holds its members and no
// other, so no record passes for a checkpoint.
func TestCheckpointIsTypedAndNeverARecord(t *testing.T) {
	s, opts := checkpointSigner(t)
	cp := sampleCheckpoint()
	jws, err := s.SignCheckpoint(cp)
	if err != nil {
		t.Fatal(err)
	}
	got, err := VerifyCheckpoint(jws, cp.Stream, cp.Chain, opts)
	if err != nil || got.Sequence != cp.Sequence || got.AuditID != cp.AuditID || got.JWS != jws {
		t.Fatalf("VerifyCheckpoint = %+v, %v", got, err)
	}
	if _, err := Verify(jws, opts); !errors.Is(err, ErrMalformed) {
		t.Fatalf("Verify accepted a checkpoint as a record: %v", err)
	}
	if _, err := VerifyUntypedCheckpoint(jws, cp.Stream, cp.Chain, opts); !errors.Is(err, ErrCheckpoint) {
		t.Fatalf("VerifyUntypedCheckpoint accepted a typed checkpoint: %v", err)
	}

	// A record whose extra members are the checkpoint's.
	p := samplePayload(ZeroAuditID)
	p.Extra = map[string]json.RawMessage{}
	for k, v := range map[string]any{"checkpoint_version": "1", "stream": cp.Stream, "chain": cp.Chain,
		"last_sequence": cp.Sequence, "last_audit_id": cp.AuditID, "trimmed_at": cp.TrimmedAt} {
		p.Extra[k], _ = json.Marshal(v)
	}
	rec, _, err := s.SignPayload(p)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := VerifyCheckpoint(rec, cp.Stream, cp.Chain, opts); !errors.Is(err, ErrCheckpoint) || !errors.Is(err, ErrUntypedCheckpoint) {
		t.Fatalf("VerifyCheckpoint of a record: %v", err)
	}
	if _, err := VerifyUntypedCheckpoint(rec, cp.Stream, cp.Chain, opts); !errors.Is(err, ErrCheckpoint) {
		t.Fatalf("VerifyUntypedCheckpoint accepted a record: %v", err)
	}

	// Typed, but not exactly the checkpoint members.
	full := `"checkpoint_version":"1","stream":"attribution","chain":"agent-1","last_sequence":3,"last_audit_id":"` +
		cp.AuditID + `","trimmed_at":"x"`
	if _, err := VerifyCheckpoint(s.signTyped(CheckpointType, []byte(`{`+full+`}`)), cp.Stream, cp.Chain, opts); err != nil {
		t.Fatalf("the exact members: %v", err)
	}
	for name, body := range map[string]string{
		"extra member":     `{` + full + `,"status":200}`,
		"member missing":   `{"checkpoint_version":"1","stream":"attribution","chain":"agent-1","last_sequence":3,"last_audit_id":"` + cp.AuditID + `"}`,
		"member in case":   `{` + strings.Replace(full, `"stream"`, `"Stream"`, 1) + `}`,
		"duplicate member": `{` + full + `,"chain":"agent-1"}`,
		"not an object":    `null`,
	} {
		bad := s.signTyped(CheckpointType, []byte(body))
		if _, err := VerifyCheckpoint(bad, cp.Stream, cp.Chain, opts); !errors.Is(err, ErrCheckpoint) {
			t.Errorf("%s: VerifyCheckpoint accepted %s: %v", name, body, err)
		}
	}
	if _, err := VerifyCheckpoint(s.signTyped("JWT", []byte(`{`+full+`}`)), cp.Stream, cp.Chain, opts); !errors.Is(err, ErrCheckpoint) {
		t.Errorf("VerifyCheckpoint accepted typ JWT: %v", err)
	}
}

// A checkpoint an earlier release signed without typ is refused by
// VerifyCheckpoint with ErrUntypedCheckpoint, and accepted, for signing
// again, only by VerifyUntypedCheckpoint.
func TestUntypedCheckpointOfAnEarlierRelease(t *testing.T) {
	s, opts := checkpointSigner(t)
	cp := sampleCheckpoint()
	body, _ := json.Marshal(cp)
	old := s.Sign(body)
	if _, err := VerifyCheckpoint(old, cp.Stream, cp.Chain, opts); !errors.Is(err, ErrUntypedCheckpoint) || !errors.Is(err, ErrCheckpoint) {
		t.Fatalf("VerifyCheckpoint of an untyped checkpoint: %v", err)
	}
	got, err := VerifyUntypedCheckpoint(old, cp.Stream, cp.Chain, opts)
	if err != nil || got.Sequence != cp.Sequence || got.AuditID != cp.AuditID || got.TrimmedAt != cp.TrimmedAt {
		t.Fatalf("VerifyUntypedCheckpoint = %+v, %v", got, err)
	}
	if _, err := VerifyUntypedCheckpoint(old, cp.Stream, "agent-2", opts); !errors.Is(err, ErrCheckpoint) {
		t.Fatalf("VerifyUntypedCheckpoint accepted another chain's checkpoint: %v", err)
	}
	other := NewSigner(newKey(t))
	if _, err := VerifyUntypedCheckpoint(other.Sign(body), cp.Stream, cp.Chain, opts); !errors.Is(err, ErrCheckpoint) {
		t.Fatalf("VerifyUntypedCheckpoint accepted an unknown key: %v", err)
	}
}
