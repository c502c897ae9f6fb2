package attributionpb

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/agtpsuite/agtp/auditsvc/attribution"
	auditv1 "github.com/agtpsuite/agtp/proto/agtp/audit/v1"
)

// everyMember sets every field of attribution.Payload by reflection, so a
// member added to Payload but not to AttributionClaims fails the round
// trip below.
func everyMember(t *testing.T) attribution.Payload {
	t.Helper()
	var p attribution.Payload
	v := reflect.ValueOf(&p).Elem()
	for i := range v.NumField() {
		f, name := v.Field(i), v.Type().Field(i).Name
		switch f.Interface().(type) {
		case string:
			f.SetString("v-" + name)
		case int:
			f.SetInt(int64(100 + i))
		case []attribution.PriorAction:
			f.Set(reflect.ValueOf([]attribution.PriorAction{{AgentID: "a", AuditID: "b", AgentURI: "c"}, {AgentID: "d"}}))
		case json.RawMessage:
			f.Set(reflect.ValueOf(json.RawMessage(`{"in": [1, "two"]}`)))
		case map[string]json.RawMessage:
			f.Set(reflect.ValueOf(map[string]json.RawMessage{"x_one": json.RawMessage(`1`), "x_two": json.RawMessage(` {"k" : null} `)}))
		default:
			t.Fatalf("Payload.%s has a type this test (and Claims) does not know", name)
		}
	}
	return p
}

func TestRoundTripKeepsEveryMember(t *testing.T) {
	for _, tc := range []struct {
		name string
		p    attribution.Payload
	}{
		{"every member", everyMember(t)},
		{"empty", attribution.Payload{}},
		{"prior action with empty members", attribution.Payload{PriorActions: []attribution.PriorAction{{}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Payload(Claims(&tc.p))
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.p) {
				t.Fatalf("round trip:\n got %+v\nwant %+v", got, tc.p)
			}
			a, errA := json.Marshal(tc.p)
			b, errB := json.Marshal(got)
			if errA != nil || errB != nil || string(a) != string(b) {
				t.Fatalf("JSON differs: %s (%v) vs %s (%v)", a, errA, b, errB)
			}
		})
	}
}

func TestClaimsEscapesExtraAsJSONMarshalDoes(t *testing.T) {
	p := attribution.Payload{Status: 200, Extra: map[string]json.RawMessage{
		"html": json.RawMessage("\"<a&b>\u2028\""), "plain": json.RawMessage(`"ab"`),
	}}
	viaJSON, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	typed, err := Payload(Claims(&p))
	if err != nil {
		t.Fatal(err)
	}
	viaTyped, err := typed.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	if string(viaJSON) != string(viaTyped) || strings.Contains(string(viaTyped), "<") {
		t.Fatalf("typed %s, json.Marshal %s", viaTyped, viaJSON)
	}
}

func TestPayloadRefusesWhatCannotBeSigned(t *testing.T) {
	for _, tc := range []struct {
		name string
		c    *auditv1.AttributionClaims
		want string
	}{
		{"extra named like a member", &auditv1.AttributionClaims{Extra: map[string][]byte{"agent_id": []byte(`"x"`)}}, "named member"},
		{"extra not JSON", &auditv1.AttributionClaims{Extra: map[string][]byte{"x": []byte(`{"a":`)}}, "not a JSON value"},
		{"extra empty", &auditv1.AttributionClaims{Extra: map[string][]byte{"x": {}}}, "not a JSON value"},
		{"extra two values", &auditv1.AttributionClaims{Extra: map[string][]byte{"x": []byte(`1 2`)}}, "not a JSON value"},
		{"run_input not JSON", &auditv1.AttributionClaims{RunInput: []byte(`nope`)}, "run_input"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := Payload(tc.c); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Payload error = %v, want one naming %q", err, tc.want)
			}
		})
	}
}

func TestPayloadOfNilIsEmpty(t *testing.T) {
	p, err := Payload(nil)
	if err != nil || !reflect.DeepEqual(p, attribution.Payload{}) {
		t.Fatalf("Payload(nil) = %+v, %v", p, err)
	}
}
