package server_test

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/agtpsuite/agtp/policysvc/internal/oauth"
	"github.com/agtpsuite/agtp/policysvc/internal/server"
	policyv1 "github.com/agtpsuite/agtp/proto/agtp/policy/v1"
	"github.com/agtpsuite/agtp/services/testkit"
)

func TestExternalCredentials(t *testing.T) {
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	_, otherPriv, _ := ed25519.GenerateKey(rand.Reader)
	jwk := jose.JSONWebKey{Key: priv, KeyID: "k1", Algorithm: string(jose.EdDSA), Use: "sig"}
	set, _ := json.Marshal(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{jwk.Public()}})
	path := filepath.Join(t.TempDir(), "jwks.json")
	if err := os.WriteFile(path, set, 0o600); err != nil {
		t.Fatal(err)
	}
	sign := func(key ed25519.PrivateKey, c jwt.Claims, scope string) string {
		s, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.EdDSA, Key: jose.JSONWebKey{Key: key, KeyID: "k1"}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		tok, err := jwt.Signed(s).Claims(c).Claims(map[string]any{"scope": scope}).Serialize()
		if err != nil {
			t.Fatal(err)
		}
		return "Bearer " + tok
	}
	now := time.Now()
	good := jwt.Claims{Issuer: "https://idp.example", Subject: "alice", Audience: jwt.Audience{"agtp-suite"}, Expiry: jwt.NewNumericDate(now.Add(time.Hour))}
	expired := good
	expired.Expiry = jwt.NewNumericDate(now.Add(-time.Hour))
	wrongAud := good
	wrongAud.Audience = jwt.Audience{"someone-else"}

	var logs testkit.SyncBuffer
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	c := serve(t, newRedis(t), server.Options{OAuth: oauth.Options{
		JWKSFile: path, Issuer: "https://idp.example", Audiences: []string{"agtp-suite"},
		RequiredOnMethods: []string{"EXECUTE"},
		MethodScopes:      map[string][]string{"TRANSFER": {"funds.move"}},
	}}, log)

	exec := func(auth string) *policyv1.AuthorizeRequest {
		r := request(agentA)
		r.Authorization = auth
		return r
	}
	t.Run("valid token lifts sub into acting_principal_id", func(t *testing.T) {
		resp := authorize(t, c, exec(sign(priv, good, "")))
		wantAllow(t, resp)
		if resp.GetActingPrincipalId() != "alice" {
			t.Fatalf("acting principal %q, want alice", resp.GetActingPrincipalId())
		}
	})
	t.Run("required method without a credential is 401 oauth-required", func(t *testing.T) {
		wantDenial(t, authorize(t, c, exec("")), 401, "oauth-required")
	})
	t.Run("method that does not require one passes without it", func(t *testing.T) {
		r := exec("")
		r.Method = "QUERY"
		wantAllow(t, authorize(t, c, r))
	})
	for name, auth := range map[string]string{
		"expired":          sign(priv, expired, ""),
		"wrongly signed":   sign(otherPriv, good, ""),
		"wrong audience":   sign(priv, wrongAud, ""),
		"alg none":         "Bearer eyJhbGciOiJub25lIiwidHlwIjoiSldUIn0." + strings.Split(sign(priv, good, ""), ".")[1] + ".",
		"not bearer":       "Basic YWxpY2U6cw==",
		"invalid on QUERY": sign(priv, expired, ""),
	} {
		t.Run(name+" is 401 oauth-invalid", func(t *testing.T) {
			r := exec(auth)
			if strings.HasPrefix(name, "invalid on") {
				r.Method = "QUERY"
			}
			wantDenial(t, authorize(t, c, r), 401, "oauth-invalid")
		})
	}
	t.Run("missing OAuth scope is 455", func(t *testing.T) {
		r := exec(sign(priv, good, "openid"))
		r.Method = "TRANSFER"
		wantDenial(t, authorize(t, c, r), 455, "oauth-scope-insufficient")
		r.Authorization = sign(priv, good, "openid funds.move")
		wantAllow(t, authorize(t, c, r))
	})
	t.Run("the token never reaches the log", func(t *testing.T) {
		tok := sign(priv, expired, "")
		wantDenial(t, authorize(t, c, exec(tok)), 401, "oauth-invalid")
		out := logs.String()
		if !strings.Contains(out, "oauth-invalid") {
			t.Fatal("the refusal was not logged")
		}
		if strings.Contains(out, strings.TrimPrefix(tok, "Bearer ")) || strings.Contains(out, "eyJ") {
			t.Fatal("a token appears in the log")
		}
	})
}

// A caller_proof_only request says whether a bearer token proves its
// agent and spends, claims and indexes nothing: the request's own
// decision that follows spends its limits once.
func TestCallerProofOnlySpendsNothing(t *testing.T) {
	tokens := testkit.NewTokenIssuer(t, "https://idp.example", "agtp-suite")
	tokenFor := func(agent string) string {
		return tokens.Bearer(t, map[string]any{"sub": "alice", "agtp_agent_id": agent})
	}
	c := serve(t, newRedis(t), server.Options{
		OAuth:      oauth.Options{JWKSFile: tokens.JWKSFile, Issuer: tokens.Issuer, Audiences: []string{tokens.Audience}},
		RateLimits: server.RateLimitOptions{Tiers: map[string]rateT{"default": {Limit: 2, Period: time.Minute}}},
	}, nil)
	proven := func(agent string, proofOnly bool) *policyv1.AuthorizeRequest {
		r := request(agentA)
		r.Authorization, r.TokenProvesAgent, r.CallerProofOnly = tokenFor(agent), true, proofOnly
		return r
	}

	for range 5 {
		resp := authorize(t, c, proven(agentA, true))
		wantAllow(t, resp)
		if resp.GetTokenIssuer() != "https://idp.example" {
			t.Fatalf("token_issuer %q, want the token's issuer", resp.GetTokenIssuer())
		}
		if resp.GetReusableForMs() != 0 || resp.GetRateLimitLimit() != 0 {
			t.Fatalf("a proof-only answer is reusable for %d ms and reports a limit of %d", resp.GetReusableForMs(), resp.GetRateLimitLimit())
		}
	}
	wantDenial(t, authorize(t, c, proven(agentB, true)), 401, "agent-unauthenticated")

	// The limit of two is whole after the proof-only calls.
	wantAllow(t, authorize(t, c, proven(agentA, false)))
	wantAllow(t, authorize(t, c, proven(agentA, false)))
	wantDenial(t, authorize(t, c, proven(agentA, false)), 429, "rate-limited")

	r := request(agentA)
	r.CallerProofOnly = true
	if _, err := c.Authorize(context.Background(), r); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("caller_proof_only without token_proves_agent: %v, want InvalidArgument", err)
	}
}

// A caller that names an agent with a bearer token that does not prove it
// is refused 401, and that refusal spends the limits that are not the
// agent's, as every refusal does (docs/policy.md, "One decision"), so that
// one address cannot send unlimited bad tokens, each costing a signature
// check: the client address's limit counts them, in a whole decision and
// in a proof-only one, and a 429 replaces the 401. The named agent's tier
// and its owner's limit are not the caller's to spend.
func TestUnprovenTokenSpendsTheAddressLimit(t *testing.T) {
	tokens := testkit.NewTokenIssuer(t, "https://idp.example", "agtp-suite")
	c := serve(t, newRedis(t), server.Options{
		OAuth: oauth.Options{JWKSFile: tokens.JWKSFile, Issuer: tokens.Issuer, Audiences: []string{tokens.Audience}},
		RateLimits: server.RateLimitOptions{
			PerIP:        rateT{Limit: 1, Period: time.Hour},
			PerPrincipal: rateT{Limit: 1, Period: time.Hour},
			Tiers:        map[string]rateT{"default": {Limit: 1, Period: time.Hour}},
		},
	}, nil)
	caller := func(ip, auth string, proofOnly bool) *policyv1.AuthorizeRequest {
		r := request(agentA)
		r.ClientIp, r.Principal = ip, "owner-1"
		r.Authorization, r.TokenProvesAgent, r.CallerProofOnly = auth, true, proofOnly
		return r
	}
	for _, proofOnly := range []bool{false, true} {
		ip := "192.0.2.10"
		if proofOnly {
			ip = "192.0.2.11"
		}
		wantDenial(t, authorize(t, c, caller(ip, "Bearer not.a.token", proofOnly)), 401, "agent-unauthenticated")
		for i, bad := range []string{"Bearer not.a.token", tokens.Bearer(t, map[string]any{"sub": "mallory", "agtp_agent_id": agentB})} {
			resp := authorize(t, c, caller(ip, bad, proofOnly))
			if d := resp.GetDenial(); d.GetStatus() != 429 || d.GetDetails()["limit"] != "ip" {
				t.Fatalf("proof only %v: bad token %d from one address under a per-address limit of 1/h = %d %s %v; want 429 (limit ip)",
					proofOnly, i+2, d.GetStatus(), d.GetReason(), d.GetDetails())
			}
		}
	}
	// The agent's tier and its owner's limit are whole: the agent itself,
	// from another address, passes once.
	good := caller("192.0.2.20", tokens.Bearer(t, map[string]any{"sub": "alice", "agtp_agent_id": agentA}), false)
	wantAllow(t, authorize(t, c, good))
}
