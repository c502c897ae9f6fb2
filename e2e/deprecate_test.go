package e2e

import (
	"encoding/json"
	"testing"
	"time"
)

// DEPRECATE over AGTP carries migration_deadline (core §7.2.18) to the
// agent's identity document, beside its successor; a deadline that is not
// a date-time is refused by the endpoint's schema and deprecates nothing.
func TestDeprecateCarriesTheMigrationDeadline(t *testing.T) {
	c := Start(t, Options{InProcess: true})
	agent, issuer := c.registerAgentKey(t, "deprecated-old", "orders:read")
	successor, _ := c.registerAgentKey(t, "deprecated-new", "orders:read")
	as := c.asIssuer(t, issuer)
	bad := as.do(withJSON(request(t, "DEPRECATE", "/"), `{"agent_id":"`+agent+`","reason":"v2","migration_deadline":"next month"}`))
	if bad.Status != 422 {
		t.Fatalf("DEPRECATE with a deadline that is no time = %d %s, want 422", bad.Status, bad.Body)
	}
	deadline := time.Now().Add(30 * 24 * time.Hour).UTC().Truncate(time.Second).Format(time.RFC3339)
	r := as.do(withJSON(request(t, "DEPRECATE", "/"),
		`{"agent_id":"`+agent+`","reason":"v2","successor_agent_id":"`+successor+`","migration_deadline":"`+deadline+`"}`))
	if r.Status != 200 {
		t.Fatalf("DEPRECATE = %d %s", r.Status, r.Body)
	}
	d := c.roundTrip(t, request(t, "DESCRIBE", "/agents/"+agent+"?format=json"))
	if d.Status != 200 {
		t.Fatalf("DESCRIBE = %d %s", d.Status, d.Body)
	}
	var doc map[string]any
	if err := json.Unmarshal(d.Body, &doc); err != nil {
		t.Fatal(err)
	}
	if doc["successor_agent_id"] != successor || doc["migration_deadline"] != deadline {
		t.Fatalf("identity document: successor %v, migration_deadline %v; want %s and %s", doc["successor_agent_id"], doc["migration_deadline"], successor, deadline)
	}
}
