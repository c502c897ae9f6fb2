package agtp

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestStatusTextNamesEveryCode(t *testing.T) {
	names := map[int]string{
		200: "OK", 202: "Accepted", 204: "No Content",
		261: "Negotiation In Progress", 262: "Authorization Required", 263: "Proposal Approved",
		301: "Moved Permanently",
		400: "Bad Request", 401: "Unauthorized", 403: "Forbidden", 404: "Not Found",
		405: "Method Not Allowed", 408: "Timeout", 409: "Conflict", 410: "Gone",
		422: "Unprocessable", 425: "Too Early", 429: "Rate Limited",
		455: "Scope Violation", 456: "Budget Exceeded", 457: "Zone Violation",
		458: "Counterparty Unverified", 459: "Method Violation", 460: "Endpoint Violation",
		461: "RCNS Contract Available", 462: "Reserved", 463: "Proposal Rejected",
		464: "RCNS No Contract", 465: "Reserved",
		500: "Server Error", 501: "Not Implemented", 503: "Unavailable",
		550: "Delegation Failure", 551: "Authority Chain Broken",
		552: "Reserved", 553: "Reserved", 554: "Reserved", 555: "Reserved",
	}
	for code, want := range names {
		if got := StatusText(code); got != want {
			t.Errorf("StatusText(%d) = %q, want %q", code, got, want)
		}
	}
	for _, code := range []int{0, 100, 201, 302, 402, 451, 454, 466, 502, 556, 999} {
		if got := StatusText(code); got != "" {
			t.Errorf("StatusText(%d) = %q, want \"\" for a code AGTP does not define", code, got)
		}
	}
}

func TestStatusClasses(t *testing.T) {
	tests := []struct {
		code                                         int
		success, redirect, client, server, agtp, res bool
	}{
		{200, true, false, false, false, false, false},
		{262, true, false, false, false, true, false},
		{301, false, true, false, false, false, false},
		{404, false, false, true, false, false, false},
		{459, false, false, true, false, true, false},
		{462, false, false, true, false, true, true},
		{465, false, false, true, false, true, true},
		{500, false, false, false, true, false, false},
		{551, false, false, false, true, true, false},
		{555, false, false, false, true, true, true},
	}
	for _, tt := range tests {
		got := []bool{IsSuccess(tt.code), IsRedirect(tt.code), IsClientError(tt.code), IsServerError(tt.code), IsAGTPSpecific(tt.code), IsReserved(tt.code)}
		want := []bool{tt.success, tt.redirect, tt.client, tt.server, tt.agtp, tt.res}
		for i := range got {
			if got[i] != want[i] {
				t.Errorf("%d: classes %v, want %v", tt.code, got, want)
				break
			}
		}
	}
}

func TestErrorBodyShape(t *testing.T) {
	b := ErrorBody{
		Status: 459, Reason: ReasonMethodInvalid, Explanation: `bad "x"`, TaskID: "t-1",
		Extra: map[string]any{"method": "frob", "catalog_version": "1.0.0", "status": 999, "reason": "ignored"},
	}
	got, err := json.Marshal(b)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"status":459,"reason":"method-invalid","explanation":"bad \"x\"","task_id":"t-1","catalog_version":"1.0.0","method":"frob"}`
	if string(got) != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
	var back ErrorBody
	if err := json.Unmarshal(got, &back); err != nil {
		t.Fatal(err)
	}
	if back.Status != 459 || back.Reason != ReasonMethodInvalid || back.TaskID != "t-1" ||
		back.Extra["method"] != "frob" || len(back.Extra) != 2 {
		t.Errorf("round trip = %+v", back)
	}

	// No task_id member when the request had none.
	got, _ = json.Marshal(ErrorBody{Status: 400, Reason: "r", Explanation: "e"})
	if string(got) != `{"status":400,"reason":"r","explanation":"e"}` {
		t.Errorf("got %s", got)
	}
	if err := json.Unmarshal([]byte(`[1]`), &back); err == nil {
		t.Error("a non-object error body was accepted")
	}
	if err := json.Unmarshal([]byte(`{"status":"x"}`), &back); err == nil {
		t.Error("a string status was accepted")
	}
	if _, err := (ErrorBody{Status: 400, Extra: map[string]any{"f": func() {}}}).Response(); err == nil {
		t.Error("an unmarshallable Extra value was accepted")
	}
}

func TestNewErrorResponse(t *testing.T) {
	r := NewErrorResponse(400, ReasonInvalidRequestLine, "x")
	if r.Status != 400 || r.Header.Get(HeaderContentType) != MediaTypeJSON ||
		string(r.Body) != `{"status":400,"reason":"invalid-request-line","explanation":"x"}` {
		t.Errorf("got %d %q %s", r.Status, r.Header, r.Body)
	}
	pe := &ProtocolError{Status: 459, Reason: ReasonMethodInvalid, Explanation: "e"}
	if r := pe.Response(); r.Status != 459 || !strings.Contains(string(r.Body), `"reason":"method-invalid"`) {
		t.Errorf("ProtocolError.Response = %d %s", r.Status, r.Body)
	}
	if !strings.Contains(pe.Error(), "459 method-invalid") {
		t.Errorf("Error() = %q", pe.Error())
	}
}

func TestValidMethodToken(t *testing.T) {
	for _, m := range append(FloorMethods(), "QUOTE", "FROBNICATE", "ABC", strings.Repeat("Z", 32)) {
		if !ValidMethodToken(m) {
			t.Errorf("ValidMethodToken(%q) = false", m)
		}
	}
	for _, m := range []string{"", "AB", strings.Repeat("Z", 33), "query", "Query", "X-NOPE", "QUERY1", "QU_ERY", "ÄBC"} {
		if ValidMethodToken(m) {
			t.Errorf("ValidMethodToken(%q) = true", m)
		}
	}
	if len(FloorMethods()) != 18 {
		t.Errorf("the floor is 18 methods, got %d", len(FloorMethods()))
	}
	for _, m := range FloorMethods() {
		if !IsFloorMethod(m) {
			t.Errorf("IsFloorMethod(%q) = false", m)
		}
	}
	if IsFloorMethod("query") || IsFloorMethod("QUOTE") {
		t.Error("IsFloorMethod matched a non-floor token")
	}
}

func TestOnlyQueryAndDiscoverAllowedIn0RTT(t *testing.T) {
	for _, m := range FloorMethods() {
		want := m == MethodQuery || m == MethodDiscover
		if AllowedIn0RTT(m) != want {
			t.Errorf("AllowedIn0RTT(%s) = %v", m, !want)
		}
	}
	if AllowedIn0RTT("query") {
		t.Error("0-RTT check must be exact")
	}
	if e := TooEarly("EXECUTE"); e.Status != 425 || e.Reason != ReasonTooEarly {
		t.Errorf("TooEarly = %+v", e)
	}
}
