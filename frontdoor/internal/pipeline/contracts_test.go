package pipeline_test

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/agtpsuite/agtp/frontdoor/internal/catalogstate"
	"github.com/agtpsuite/agtp/frontdoor/internal/pipeline"
	identityv1 "github.com/agtpsuite/agtp/proto/agtp/identity/v1"
	rcnsv1 "github.com/agtpsuite/agtp/proto/agtp/rcns/v1"
	"github.com/agtpsuite/agtp/services/agtp"
	"github.com/agtpsuite/agtp/services/grpcerr"
	"github.com/agtpsuite/agtp/services/testkit"
)

// downDeps makes identitysvc and rcnssvc fail every call and counts the
// calls.
func downDeps(identityCalls, rcnsCalls *atomic.Int32) func(f *stageFixture, _ *pipeline.Options, _ *catalogstate.Store) {
	return func(f *stageFixture, _ *pipeline.Options, _ *catalogstate.Store) {
		f.identity.ResolveAgentF = func(context.Context, *identityv1.ResolveAgentRequest) (*identityv1.ResolveAgentResponse, error) {
			identityCalls.Add(1)
			return nil, grpcerr.Unavailable("down", "identitysvc is down")
		}
		down := func() error { rcnsCalls.Add(1); return grpcerr.Unavailable("down", "rcnssvc is down") }
		f.rcns = &testkit.RCNSStub{
			GetContractF: func(context.Context, *rcnsv1.GetContractRequest) (*rcnsv1.GetContractResponse, error) {
				return nil, down()
			},
			GateF: func(context.Context, *rcnsv1.GateRequest) (*rcnsv1.GateResponse, error) { return nil, down() },
		}
	}
}

// An unmatched request is answered 404 or 405 before its caller is
// resolved unless it presents a contract, asks for RCNS or names a
// session; and a session's contract lookup that fails leaves the 404 or
// 405 standing, so an outage of identitysvc or rcnssvc never turns them
// into 503 (docs/decisions.md#D-decision-order).
func TestUnmatchedBeforeCaller(t *testing.T) {
	session := []string{agtp.HeaderSessionID, "sess-" + "0123456789abcdef0123456789"}
	for _, tc := range []struct {
		name, method, target string
		headers              []string
		status               int
		// lookups says whether the caller is looked up.
		lookups bool
	}{
		{"an unknown path is 404 without a look-up", "QUERY", "/nowhere", nil, agtp.StatusNotFound, false},
		{"another method is 405 without a look-up", "SUMMARIZE", "/notes", nil, agtp.StatusMethodNotAllowed, false},
		{"a session's lookup failing leaves 404", "QUERY", "/nowhere", session, agtp.StatusNotFound, true},
		{"a session's lookup failing leaves 405", "SUMMARIZE", "/notes", session, agtp.StatusMethodNotAllowed, true},
		{"Allow-RCNS asked: an outage is 503", "QUERY", "/nowhere", []string{agtp.HeaderAllowRCNS, "true"}, agtp.StatusUnavailable, true},
		{"Allow-RCNS other than true is 404", "QUERY", "/nowhere", []string{agtp.HeaderAllowRCNS, "yes"}, agtp.StatusNotFound, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var identityCalls, rcnsCalls atomic.Int32
			f := newStageFixture(t, downDeps(&identityCalls, &rcnsCalls))
			resp, body := f.do(t, stageRequest(tc.method, tc.target, "", tc.headers...))
			if resp.Status != tc.status {
				t.Fatalf("answer = %d %s, want %d", resp.Status, resp.Body, tc.status)
			}
			wantAnswer(t, resp, body, tc.status, body["reason"].(string))
			if looked := identityCalls.Load() > 0; looked != tc.lookups || !tc.lookups && rcnsCalls.Load() != 0 {
				t.Fatalf("%d identitysvc and %d rcnssvc calls", identityCalls.Load(), rcnsCalls.Load())
			}
		})
	}
}

// Without rcnssvc, Allow-RCNS: true is 464 rcns-disabled with an
// RCNS-Attempt-Id (api assertion 90), decided before the caller is
// resolved; without the header the pair stays 404 (api assertion 89).
func TestAllowRCNSWithoutRCNSIs464(t *testing.T) {
	var identityCalls atomic.Int32
	f := newStageFixture(t, func(f *stageFixture, _ *pipeline.Options, _ *catalogstate.Store) {
		f.identity.ResolveAgentF = func(context.Context, *identityv1.ResolveAgentRequest) (*identityv1.ResolveAgentResponse, error) {
			identityCalls.Add(1)
			return nil, grpcerr.Unavailable("down", "identitysvc is down")
		}
	})
	resp, body := f.do(t, stageRequest("QUERY", "/nowhere", "", agtp.HeaderAllowRCNS, "true"))
	wantAnswer(t, resp, body, agtp.StatusRCNSNoContract, "rcns-disabled")
	if resp.Header.Get(agtp.HeaderRCNSAttemptID) == "" || identityCalls.Load() != 0 {
		t.Fatalf("464 without RCNS-Attempt-Id, or after %d identitysvc calls: %v", identityCalls.Load(), resp.Header)
	}
	for _, headers := range [][]string{nil, {agtp.HeaderContractSynthesized, "syn-1"}} {
		if resp, _ := f.do(t, stageRequest("QUERY", "/nowhere", "", headers...)); resp.Status != agtp.StatusNotFound {
			t.Fatalf("without Allow-RCNS %v: %d %s", headers, resp.Status, resp.Body)
		}
	}
}

// A contract presented on another method than its own is 405 with the
// body AGTP-API §11 requires, naming the contract's method; the front
// door passes the request's pair to rcnssvc, which decides.
func TestPresentedContractOnAnotherMethod(t *testing.T) {
	var asked *rcnsv1.GetContractRequest
	f := newStageFixture(t, func(f *stageFixture, _ *pipeline.Options, _ *catalogstate.Store) {
		f.rcns = &testkit.RCNSStub{GetContractF: func(_ context.Context, in *rcnsv1.GetContractRequest) (*rcnsv1.GetContractResponse, error) {
			asked = in
			return &rcnsv1.GetContractResponse{Status: agtp.StatusMethodNotAllowed, Reason: "contract-method-mismatch", Explanation: "this contract serves SUMMARIZE /digest",
				Contract: &rcnsv1.Contract{SynthesisId: "syn-1", Method: "SUMMARIZE", Path: "/digest"}}, nil
		}}
	})
	resp, body := f.do(t, stageRequest("QUERY", "/digest", "", agtp.HeaderContractSynthesized, "syn-1"))
	wantAnswer(t, resp, body, agtp.StatusMethodNotAllowed, "contract-method-mismatch")
	if asked.GetSynthesisId() != "syn-1" || asked.GetMethod() != "QUERY" || asked.GetPath() != "/digest" {
		t.Fatalf("rcnssvc was asked %v", asked)
	}
	if !contains(string(resp.Body), `"allowed_methods_for_path":["SUMMARIZE"]`) || !contains(string(resp.Body), `"redirects_for_path":{}`) {
		t.Fatalf("405 body %s", resp.Body)
	}
}

// A proven caller naming a session is looked up in rcnssvc for a
// contract of its own; rcnssvc down leaves the 404.
func TestSessionContractLookupDown(t *testing.T) {
	var rcnsCalls atomic.Int32
	f := newStageFixture(t, func(f *stageFixture, _ *pipeline.Options, _ *catalogstate.Store) {
		f.rcns = &testkit.RCNSStub{GetContractF: func(context.Context, *rcnsv1.GetContractRequest) (*rcnsv1.GetContractResponse, error) {
			rcnsCalls.Add(1)
			return nil, grpcerr.Unavailable("down", "rcnssvc is down")
		}}
	})
	resp, body := f.do(t, stageRequest("QUERY", "/nowhere", "", agtp.HeaderSessionID, "sess-0123456789abcdef0123456789"))
	wantAnswer(t, resp, body, agtp.StatusNotFound, "not-found")
	if rcnsCalls.Load() != 1 {
		t.Fatalf("rcnssvc asked %d times", rcnsCalls.Load())
	}
}
