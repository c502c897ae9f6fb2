package suite

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/agtpsuite/agtp/services/agtp"
	"github.com/agtpsuite/agtp/services/agtp/client"
	"github.com/agtpsuite/agtp/services/keyfile"
	"github.com/agtpsuite/agtp/services/testkit"
)

// The request fields the front door echoes into its response or records in
// the Attribution-Record have bounds (docs/wire.md, "Fields the front door
// echoes"): a longer value is refused 400 before anything runs, and values
// at the bounds, all at once and with the longest Idempotency-Key, give
// answers the project's client reads with its default limits and records
// auditsvc takes.
func TestEchoedFieldBounds(t *testing.T) {
	s := startTestSuite(t, Config{})
	roots, err := keyfile.CertPool(s.Layout().CA())
	if err != nil {
		t.Fatal(err)
	}
	cert, err := tls.LoadX509KeyPair(s.demoCert, s.demoCertKey)
	if err != nil {
		t.Fatal(err)
	}
	ac, err := client.New(client.Options{RootCAs: roots, Certificates: []tls.Certificate{cert}})
	if err != nil {
		t.Fatal(err)
	}
	defer ac.Close()
	ctx := context.Background()
	send := func(method, path string, body []byte, fields map[string]string) *agtp.Response {
		t.Helper()
		var hdr agtp.Header
		for name, v := range fields {
			hdr.Set(name, v)
		}
		resp, err := ac.Send(ctx, method, "agtp://"+s.AGTPAddr()+path, body, hdr)
		if err != nil {
			t.Fatalf("%s %s: the client (default limits) cannot read the answer: %v", method, path, err)
		}
		return resp
	}
	testkit.WaitFor(t, 30*time.Second, "the front door's catalog", func() bool {
		resp, err := ac.Send(ctx, "QUERY", "agtp://"+s.AGTPAddr()+"/orders?limit=1", nil, nil)
		return err == nil && resp.Status == agtp.StatusOK
	})
	orders := func() int {
		t.Helper()
		resp := send("QUERY", "/orders?limit=100", nil, nil)
		var out struct {
			Result struct {
				Orders []json.RawMessage `json:"orders"`
			} `json:"result"`
		}
		if resp.Status != agtp.StatusOK || json.Unmarshal(resp.Body, &out) != nil {
			t.Fatalf("QUERY /orders = %d %s", resp.Status, resp.Body)
		}
		return len(out.Result.Orders)
	}

	session := make([]byte, 192) // 256 base64url characters
	_, _ = rand.Read(session)
	atBound := map[string]string{
		agtp.HeaderAgentID:   s.demoAgent.AgentID,
		agtp.HeaderTaskID:    strings.Repeat("t", 256),
		agtp.HeaderRequestID: strings.Repeat("r", 256),
		agtp.HeaderSessionID: base64.RawURLEncoding.EncodeToString(session),
	}
	if len(atBound[agtp.HeaderSessionID]) != 256 {
		t.Fatal("Session-ID is not at its bound")
	}
	key := strings.Repeat("k", 255) // the longest Idempotency-Key
	create := []byte(`{"lines":[{"sku":"widget","quantity":1}]}`)
	before := orders()

	for _, tc := range []struct {
		field, value string
		status       int
		reason       string
		max          int // named in the body; 0: the caller stage's 401 names none
	}{
		{agtp.HeaderAgentID, s.demoAgent.AgentID + "0", agtp.StatusUnauthorized, "agent-unauthenticated", 0},
		{agtp.HeaderTaskID, strings.Repeat("t", 257), agtp.StatusBadRequest, "invalid-header", 256},
		{agtp.HeaderTaskID, strings.Repeat("t", 40<<10), agtp.StatusBadRequest, "invalid-header", 256},
		{agtp.HeaderRequestID, strings.Repeat("r", 257), agtp.StatusBadRequest, "invalid-header", 256},
		{agtp.HeaderSessionID, atBound[agtp.HeaderSessionID] + "s", agtp.StatusBadRequest, "session-id-invalid", 256},
	} {
		fields := map[string]string{agtp.HeaderIdempotencyKey: key}
		for name, v := range atBound {
			fields[name] = v
		}
		fields[tc.field] = tc.value
		resp := send("CREATE", "/orders", create, fields)
		var body struct {
			Reason   string `json:"reason"`
			Field    string `json:"field"`
			MaxBytes int    `json:"max_bytes"`
		}
		_ = json.Unmarshal(resp.Body, &body)
		if resp.Status != tc.status || body.Reason != tc.reason || tc.max != 0 && (body.Field != tc.field || body.MaxBytes != tc.max) {
			t.Fatalf("CREATE with a %d-byte %s = %d %s, want %d %s naming the field and %d", len(tc.value), tc.field, resp.Status, resp.Body, tc.status, tc.reason, tc.max)
		}
		if resp.Header.Get(tc.field) == tc.value {
			t.Fatalf("the refusal echoes %s", tc.field)
		}
	}
	if n := orders(); n != before {
		t.Fatalf("refused CREATEs made %d orders", n-before)
	}

	// Every field at its bound: the order is made once, and the retry is
	// its replay, not a 503.
	fields := map[string]string{agtp.HeaderIdempotencyKey: key}
	for name, v := range atBound {
		fields[name] = v
	}
	first := send("CREATE", "/orders", create, fields)
	if first.Status/100 != 2 || first.Header.Get(agtp.HeaderAttributionRecord) == "" {
		t.Fatalf("CREATE with every field at its bound = %d %s", first.Status, first.Body)
	}
	for _, name := range []string{agtp.HeaderAgentID, agtp.HeaderTaskID, agtp.HeaderRequestID} {
		if first.Header.Get(name) != atBound[name] {
			t.Fatalf("%s echoed as %q", name, first.Header.Get(name))
		}
	}
	again := send("CREATE", "/orders", create, fields)
	if again.Status != first.Status || again.Header.Get(agtp.HeaderIdempotentReplayed) != "true" {
		t.Fatalf("retry = %d %s (replayed %q)", again.Status, again.Body, again.Header.Get(agtp.HeaderIdempotentReplayed))
	}
	if n := orders(); n != before+1 {
		t.Fatalf("%d orders made, want 1", n-before)
	}
	if resp := send("QUERY", "/orders/ord-1001", nil, atBound); resp.Status != agtp.StatusOK {
		t.Fatalf("QUERY with every field at its bound = %d %s", resp.Status, resp.Body)
	}
}
