package chain

import (
	"testing"

	"github.com/agtpsuite/agtp/auditsvc/attribution"
)

func TestCheckpointNamesItsChain(t *testing.T) {
	s := &Store{opts: Options{}.withDefaults()}
	s.signer.Store(attribution.NewSigner(nil))
	cp, err := s.signCheckpoint(attribution.StreamAttribution, "a", attribution.Entry{Sequence: 3, AuditID: attribution.ZeroAuditID[:63] + "1"})
	if err != nil {
		t.Fatal(err)
	}
	none := attribution.VerifyOptions{Algorithms: []string{attribution.AlgNone}}
	if got, err := attribution.VerifyCheckpoint(cp.JWS, attribution.StreamAttribution, "a", none); err != nil || got.Sequence != 3 {
		t.Fatalf("VerifyCheckpoint: %+v %v", got, err)
	}
	if _, err := attribution.VerifyCheckpoint(cp.JWS, attribution.StreamAttribution, "b", none); err == nil {
		t.Fatal("a checkpoint of another chain was accepted")
	}
	if _, err := attribution.VerifyCheckpoint(cp.JWS, attribution.StreamLifecycle, "a", none); err == nil {
		t.Fatal("a checkpoint of another stream was accepted")
	}
	if _, err := attribution.VerifyCheckpoint(cp.JWS, attribution.StreamAttribution, "a", attribution.VerifyOptions{}); err == nil {
		t.Fatal("an alg none checkpoint was accepted without allowing none")
	}
}
