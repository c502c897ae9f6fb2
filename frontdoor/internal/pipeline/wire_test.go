package pipeline_test

import (
	"context"
	"testing"

	"github.com/agtpsuite/agtp/frontdoor/internal/catalogstate"
	"github.com/agtpsuite/agtp/frontdoor/internal/pipeline"
	"github.com/agtpsuite/agtp/services/agtp"
)

func TestWireStage(t *testing.T) {
	for _, tc := range []struct {
		name    string
		change  func(f *stageFixture, opts *pipeline.Options, store *catalogstate.Store)
		headers []string
		status  int
		reason  string
	}{
		{"no catalog yet is 503 catalog-unavailable", func(_ *stageFixture, _ *pipeline.Options, store *catalogstate.Store) { *store = catalogstate.Store{} },
			nil, agtp.StatusUnavailable, "catalog-unavailable"},
		{"Delegation-Chain without delegation is 501", nil,
			[]string{agtp.HeaderDelegationChain, "x"}, agtp.StatusNotImplemented, "delegation-unsupported"},
		{"Delegation-Chain with delegation goes on", func(_ *stageFixture, opts *pipeline.Options, _ *catalogstate.Store) { opts.DelegationEnabled = true },
			[]string{agtp.HeaderDelegationChain, "x"}, agtp.StatusOK, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newStageFixture(t, tc.change)
			resp, body := f.do(t, stageRequest("QUERY", "/notes/n-1", "", tc.headers...))
			if tc.reason == "" {
				if resp.Status != tc.status {
					t.Fatalf("answer = %d %s, want %d", resp.Status, resp.Body, tc.status)
				}
				return
			}
			wantAnswer(t, resp, body, tc.status, tc.reason)
		})
	}
}

// Delegation-Chain's 501 comes after the structural codes: an illegal
// method or path, or a pair that does not exist, is answered with what to
// fix (core §5.5.3, docs/decisions.md#D-decision-order).
func TestDelegationAfterStructure(t *testing.T) {
	for _, tc := range []struct {
		name, method, target string
		status               int
	}{
		{"an illegal method is 459", "FROB", "/notes", agtp.StatusMethodViolation},
		{"a trailing slash is 460", "QUERY", "/notes/n-1/", agtp.StatusEndpointViolation},
		{"a known path under another method is 405", "SUMMARIZE", "/notes", agtp.StatusMethodNotAllowed},
		{"an unknown path is 404", "QUERY", "/nowhere", agtp.StatusNotFound},
		{"a matched request is 501", "QUERY", "/notes/n-1", agtp.StatusNotImplemented},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newStageFixture(t, nil)
			resp, _ := f.do(t, stageRequest(tc.method, tc.target, "", agtp.HeaderDelegationChain, "x"))
			if resp.Status != tc.status {
				t.Fatalf("answer = %d %s, want %d", resp.Status, resp.Body, tc.status)
			}
		})
	}
}

// A wire error the transport answers costs no network call: its record
// is unsigned, unchained and marked wire_error, and 459 names the
// catalog version.
func TestRespondErrorRecordsNothing(t *testing.T) {
	f := newStageFixture(t, nil)
	req := stageRequest("FROB", "/notes", "")
	resp := f.p.RespondError(context.Background(), stageConn(), req, &agtp.ProtocolError{Status: agtp.StatusMethodViolation, Reason: "method-violation", Explanation: "no FROB"})
	if resp.Status != agtp.StatusMethodViolation || resp.Header.Get(agtp.HeaderServerID) != "agtp.stage.test" {
		t.Fatalf("answer = %d %v", resp.Status, resp.Header)
	}
	body := string(resp.Body)
	if !contains(body, `"catalog_version":"1.0.0"`) || !contains(body, `"method":"FROB"`) {
		t.Fatalf("459 body = %s", body)
	}
	if resp.Header.Get(agtp.HeaderAttributionRecord) == "" || len(f.appended()) != 0 {
		t.Fatalf("record %q, appended %d", resp.Header.Get(agtp.HeaderAttributionRecord), len(f.appended()))
	}
}
