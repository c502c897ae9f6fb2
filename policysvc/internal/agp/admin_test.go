package agp

import (
	"encoding/json"
	"log/slog"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/agtpsuite/agtp/policysvc/internal/changelog/changelogtest"
	agpv1 "github.com/agtpsuite/agtp/proto/agtp/agp/v1"
	"github.com/agtpsuite/agtp/services/access"
	"github.com/agtpsuite/agtp/services/rediskeys"
	"github.com/agtpsuite/agtp/services/testkit"
)

// TestGlobalKeys pins the global flag: stored and returned with the key by
// every read, set only when asked, only on an admin key, and cleared by a
// replacement that does not ask for it.
func TestGlobalKeys(t *testing.T) {
	rdb := testkit.StartRedis(t).Client(t)
	srv, err := New(rdb, slog.New(slog.DiscardHandler), Options{})
	if err != nil {
		t.Fatal(err)
	}
	srv.RecordChanges(changelogtest.Start(t).Recorder)
	register := func(g grpc.ServiceRegistrar) { agpv1.RegisterAgpServiceServer(g, srv) }
	c := agpv1.NewAgpServiceClient(testkit.ServeGRPCAs(t, testkit.Operator, register))
	// The front door creates keys for AGP admin key holders, never global
	// ones.
	viaFrontDoor := agpv1.NewAgpServiceClient(testkit.ServeGRPCAs(t, testkit.FrontDoor, register))

	// global reads the flag back through Resolve and List.
	global := func(t *testing.T, hash, id string) bool {
		t.Helper()
		k := must(c.ResolveApiKey(ctx(), &agpv1.ResolveApiKeyRequest{KeySha256: hash}))(t).GetKey()
		for _, l := range must(c.ListApiKeys(ctx(), &agpv1.ListApiKeysRequest{AgentId: k.GetAgentId()}))(t).GetKeys() {
			if l.GetId() == id && l.GetGlobal() != k.GetGlobal() {
				t.Fatalf("List says global=%v, Resolve %v", l.GetGlobal(), k.GetGlobal())
			}
		}
		return k.GetGlobal()
	}

	for _, tc := range []struct {
		name   string
		in     *agpv1.ImportApiKeyRequest
		code   codes.Code
		global bool
	}{
		{"an admin key made global", &agpv1.ImportApiKeyRequest{Id: "ops", AgentId: alice, Scopes: []string{"admin"}, Global: true, KeySha256: hashA}, codes.OK, true},
		{"replaced without the flag", &agpv1.ImportApiKeyRequest{Id: "ops", AgentId: alice, Scopes: []string{"admin"}, KeySha256: hashA}, codes.OK, false},
		{"a * key made global", &agpv1.ImportApiKeyRequest{Id: "ops", AgentId: alice, Scopes: []string{"*"}, Global: true, KeySha256: hashA}, codes.OK, true},
		{"an admin key by default", &agpv1.ImportApiKeyRequest{Id: "local", AgentId: bob, Scopes: []string{"admin", "query"}, KeySha256: hashB}, codes.OK, false},
		{"global without the admin scope", &agpv1.ImportApiKeyRequest{Id: "odd", AgentId: bob, Scopes: []string{"query", "execute"}, Global: true, KeySha256: hashB}, codes.InvalidArgument, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := c.ImportApiKey(ctx(), tc.in)
			if code(err) != tc.code {
				t.Fatalf("ImportApiKey: %v, want %v", err, tc.code)
			}
			if err != nil {
				return
			}
			if out.GetKey().GetGlobal() != tc.global || global(t, tc.in.GetKeySha256(), tc.in.GetId()) != tc.global {
				t.Fatalf("global = %v as stored, want %v", out.GetKey().GetGlobal(), tc.global)
			}
		})
	}

	t.Run("CreateApiKey", func(t *testing.T) {
		k := must(c.CreateApiKey(ctx(), &agpv1.CreateApiKeyRequest{AgentId: bob, Scopes: []string{"admin"}, Global: true}))(t)
		if !k.GetKey().GetGlobal() {
			t.Fatalf("created %v, want global", k.GetKey())
		}
		if _, err := c.CreateApiKey(ctx(), &agpv1.CreateApiKeyRequest{AgentId: bob, Scopes: []string{"discover"}, Global: true}); code(err) != codes.InvalidArgument {
			t.Fatalf("global discover key: %v, want InvalidArgument", err)
		}
		if _, err := viaFrontDoor.CreateApiKey(ctx(), &agpv1.CreateApiKeyRequest{AgentId: bob, Scopes: []string{"admin"}, Global: true}); code(err) != codes.PermissionDenied {
			t.Fatalf("global key through the front door: %v, want PermissionDenied", err)
		}
	})

	t.Run("a record written before global keys is not global", func(t *testing.T) {
		const hash = "3333333333333333333333333333333333333333333333333333333333333333"
		if err := rdb.HSet(ctx(), rediskeys.AGPKey(hash), fieldID, "old", fieldAgent, alice, fieldScopes, "admin", fieldCreated, "0").Err(); err != nil {
			t.Fatal(err)
		}
		if err := rdb.HSet(ctx(), rediskeys.AGPKeyIndex, "old", hash).Err(); err != nil {
			t.Fatal(err)
		}
		if global(t, hash, "old") {
			t.Fatal("a record without the field resolved as global")
		}
	})
}

// TestRevokeApiKeyForAgent pins RevokeApiKey with an agent_id: a key of
// another agent is refused and stays usable.
func TestRevokeApiKeyForAgent(t *testing.T) {
	c := start(t, Options{})
	bobs := must(c.CreateApiKey(ctx(), &agpv1.CreateApiKeyRequest{AgentId: bob, Scopes: []string{"query"}}))(t).GetKey()
	for _, tc := range []struct {
		name string
		in   *agpv1.RevokeApiKeyRequest
		code codes.Code
		// gone: Bob's key no longer resolves afterwards.
		gone bool
	}{
		{"another agent's key", &agpv1.RevokeApiKeyRequest{Id: bobs.GetId(), AgentId: alice}, codes.PermissionDenied, false},
		{"a malformed agent", &agpv1.RevokeApiKeyRequest{Id: bobs.GetId(), AgentId: "bob"}, codes.InvalidArgument, false},
		{"no such key", &agpv1.RevokeApiKeyRequest{Id: "key_none", AgentId: alice}, codes.NotFound, false},
		{"the agent's own key", &agpv1.RevokeApiKeyRequest{Id: bobs.GetId(), AgentId: bob}, codes.OK, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := c.RevokeApiKey(ctx(), tc.in); code(err) != tc.code {
				t.Fatalf("RevokeApiKey: %v, want %v", err, tc.code)
			}
			list := must(c.ListApiKeys(ctx(), &agpv1.ListApiKeysRequest{AgentId: bob}))(t).GetKeys()
			if gone := len(list) == 0; gone != tc.gone {
				t.Fatalf("Bob's keys after the call: %v, want gone=%v", list, tc.gone)
			}
		})
	}
}

// TestKeyRevocationIsSigned pins that revoking an agent's key is signed
// into the agent's lifecycle stream, naming the person the console acts
// for, before the key goes; a revocation that cannot be signed is not
// made.
func TestKeyRevocationIsSigned(t *testing.T) {
	const person = "alice@example.test"
	c, audit := startAudited(t, Options{}, access.Console)
	asPerson := access.ForPerson(ctx(), person)
	bobs := must(c.CreateApiKey(ctx(), &agpv1.CreateApiKeyRequest{AgentId: bob, Scopes: []string{"query"}}))(t).GetKey()
	listed := func(t *testing.T, id string) bool {
		t.Helper()
		for _, k := range must(c.ListApiKeys(ctx(), &agpv1.ListApiKeysRequest{}))(t).GetKeys() {
			if k.GetId() == id {
				return true
			}
		}
		return false
	}

	audit.Down(true)
	if _, err := c.RevokeApiKey(asPerson, &agpv1.RevokeApiKeyRequest{Id: bobs.GetId()}); status.Code(err) != codes.Unavailable || !listed(t, bobs.GetId()) {
		t.Fatalf("revocation with auditsvc down: %v, key still listed %v; want Unavailable and the key kept", err, listed(t, bobs.GetId()))
	}
	audit.Down(false)
	if _, err := c.RevokeApiKey(asPerson, &agpv1.RevokeApiKeyRequest{Id: bobs.GetId()}); err != nil || listed(t, bobs.GetId()) {
		t.Fatalf("revocation: %v, key still listed %v", err, listed(t, bobs.GetId()))
	}
	ev := audit.Events()
	if len(ev) != 1 || ev[0].GetAgentId() != bob || ev[0].GetEventType() != EventKeyRevoked {
		t.Fatalf("events = %v, want one %s for bob", ev, EventKeyRevoked)
	}
	var claims map[string]any
	if err := json.Unmarshal([]byte(ev[0].GetClaims()), &claims); err != nil {
		t.Fatal(err)
	}
	if claims["actor"] != "operator/console for "+person || claims["person"] != person || claims["key_id"] != bobs.GetId() {
		t.Fatalf("claims = %v, want the console for %s revoking %s", claims, person, bobs.GetId())
	}
	// A retried revocation finds the key gone and signs nothing more.
	if _, err := c.RevokeApiKey(asPerson, &agpv1.RevokeApiKeyRequest{Id: bobs.GetId()}); status.Code(err) != codes.NotFound || len(audit.Events()) != 1 {
		t.Fatalf("second revocation: %v, %d events", err, len(audit.Events()))
	}
}
