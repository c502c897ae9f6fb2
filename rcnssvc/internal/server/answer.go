package server

import (
	"encoding/json"

	rcnsv1 "github.com/agtpsuite/agtp/proto/agtp/rcns/v1"
	"github.com/agtpsuite/agtp/services/agtp"
)

// answer builds a PROPOSE response: body_json is the whole AGTP body,
// with status, reason and explanation as the error bodies of
// docs/decisions.md#D-error-body have them, and the Negotiation-ID.
func answer(outcome rcnsv1.ProposeOutcome, status int, negID string, body map[string]any) *rcnsv1.ProposeResponse {
	body["status"] = status
	if negID != "" {
		body["negotiation_id"] = negID
	}
	b, err := json.Marshal(body)
	if err != nil {
		b = []byte(`{"status":500,"reason":"internal","explanation":"the response could not be encoded"}`)
		status = agtp.StatusServerError
	}
	//lint:ignore SA1019 the first release's field, filled for its clients beside Body
	return &rcnsv1.ProposeResponse{Outcome: outcome, Status: int32(status), BodyJson: b, Body: string(b), NegotiationId: negID}
}

func failBody(reason, explanation string, extra map[string]any) map[string]any {
	body := map[string]any{"reason": reason, "explanation": explanation}
	for k, v := range extra {
		body[k] = v
	}
	return body
}

// invalid is 400, 459 or 460: the proposal itself is malformed.
func invalid(status int, negID, reason, explanation string, extra map[string]any) *rcnsv1.ProposeResponse {
	return answer(rcnsv1.ProposeOutcome_PROPOSE_OUTCOME_INVALID, status, negID, failBody(reason, explanation, extra))
}

// rejected is 463 (core §5.6: reason in the five-value vocabulary and an
// explanation; a counter_proposal where one exists).
func rejected(negID, reason, explanation string, extra map[string]any) *rcnsv1.ProposeResponse {
	return answer(rcnsv1.ProposeOutcome_PROPOSE_OUTCOME_REJECTED, agtp.StatusProposalRejected, negID, failBody(reason, explanation, extra))
}

// authorizationRequired is 262; the body names its condition in reason
// and in type (docs/decisions.md#D-262-body: AGTP-API calls it the body
// type).
func authorizationRequired(negID, condition, explanation string, extra map[string]any) *rcnsv1.ProposeResponse {
	body := failBody(condition, explanation, extra)
	body["type"] = condition
	return answer(rcnsv1.ProposeOutcome_PROPOSE_OUTCOME_AUTHORIZATION_REQUIRED, agtp.StatusAuthorizationRequired, negID, body)
}
