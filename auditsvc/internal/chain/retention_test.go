package chain

import (
	"testing"

	"github.com/agtpsuite/agtp/auditsvc/attribution"
	"github.com/agtpsuite/agtp/services/rediskeys"
)

func TestChainOfStreamKey(t *testing.T) {
	agent := "agent-1"
	for key, want := range map[string]ChainRef{
		rediskeys.ChainStream(agent):             {attribution.StreamAttribution, agent},
		rediskeys.LifecycleStream(agent):         {attribution.StreamLifecycle, agent},
		rediskeys.SignedStream(agent, "confirm"): {"confirm", agent},
	} {
		if got, ok := chainOfStreamKey(key); !ok || got != want {
			t.Errorf("chainOfStreamKey(%q) = %v %v, want %v", key, got, ok, want)
		}
	}
	for _, key := range []string{
		rediskeys.ChainHead(agent), rediskeys.ChainCheckpoint(agent), rediskeys.LifecycleHead(agent),
		rediskeys.LifecycleCheckpoint(agent), rediskeys.SignedStreamHead(agent, "confirm"),
		rediskeys.SignedStreamCheckpoint(agent, "confirm"), rediskeys.SignedStream(agent, attribution.StreamLifecycle),
		rediskeys.Inbox(agent), "agtp:{a{b}:chain:records",
	} {
		if got, ok := chainOfStreamKey(key); ok {
			t.Errorf("chainOfStreamKey(%q) = %v, want no chain", key, got)
		}
	}
}

func TestCheckpointNamesItsChain(t *testing.T) {
	s := &Store{opts: Options{}.withDefaults()}
	s.signer.Store(attribution.NewSigner(nil))
	cp, err := s.signCheckpoint(attribution.StreamAttribution, "a", attribution.Entry{Sequence: 3, AuditID: attribution.ZeroAuditID[:63] + "1"})
	if err != nil {
		t.Fatal(err)
	}
	none := attribution.VerifyOptions{Algorithms: []string{attribution.AlgNone}}
	if got, err := parseCheckpoint(cp.JWS, attribution.StreamAttribution, "a", none); err != nil || got.Sequence != 3 {
		t.Fatalf("parseCheckpoint: %+v %v", got, err)
	}
	if _, err := parseCheckpoint(cp.JWS, attribution.StreamAttribution, "b", none); err == nil {
		t.Fatal("a checkpoint of another chain was accepted")
	}
	if _, err := parseCheckpoint(cp.JWS, attribution.StreamLifecycle, "a", none); err == nil {
		t.Fatal("a checkpoint of another stream was accepted")
	}
	if _, err := parseCheckpoint(cp.JWS, attribution.StreamAttribution, "a", attribution.VerifyOptions{}); err == nil {
		t.Fatal("an alg none checkpoint was accepted without allowing none")
	}
}
