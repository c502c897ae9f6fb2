package agp

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/agtpsuite/agtp/policysvc/agpkey"
	"github.com/agtpsuite/agtp/policysvc/internal/changelog/changelogtest"
	agpv1 "github.com/agtpsuite/agtp/proto/agtp/agp/v1"
	"github.com/agtpsuite/agtp/services/access"
	"github.com/agtpsuite/agtp/services/jsondoc"
	"github.com/agtpsuite/agtp/services/testkit"
)

const (
	alice = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
	bob   = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
	hashA = "1111111111111111111111111111111111111111111111111111111111111111"
	hashB = "2222222222222222222222222222222222222222222222222222222222222222"
)

func code(err error) codes.Code { return status.Code(err) }
func ctx() context.Context      { return context.Background() }

// must(call)(t) fails the test on the call's error.
func must[T any](v T, err error) func(*testing.T) T {
	return func(t *testing.T) T {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
}

func start(t *testing.T, opts Options) agpv1.AgpServiceClient {
	t.Helper()
	c, _ := startAudited(t, opts, access.Identity{})
	return c
}

// startAudited serves the AGP service to caller, with key revocations
// signed to the returned auditsvc stand-in.
func startAudited(t *testing.T, opts Options, caller access.Identity) (agpv1.AgpServiceClient, *changelogtest.Audit) {
	t.Helper()
	rdb := testkit.StartRedis(t).Client(t)
	srv, err := New(rdb, slog.New(slog.DiscardHandler), opts)
	if err != nil {
		t.Fatal(err)
	}
	audit := changelogtest.Start(t)
	srv.RecordChanges(audit.Recorder)
	register := func(g grpc.ServiceRegistrar) { agpv1.RegisterAgpServiceServer(g, srv) }
	if caller.IsZero() {
		return agpv1.NewAgpServiceClient(testkit.ServeGRPC(t, register)), audit
	}
	return agpv1.NewAgpServiceClient(testkit.ServeGRPCAs(t, caller, register)), audit
}

func TestOptionsValidate(t *testing.T) {
	for _, tc := range []struct {
		opts Options
		ok   bool
	}{
		{Options{}, true},
		{Options{ExecutePolicy: "strict", MaxExecuteAmountCents: 5000}, true},
		{Options{ExecutePolicy: "confirm"}, true},
		{Options{ExecutePolicy: "sometimes"}, false},
		{Options{ExecutePolicy: "STRICT"}, false},
		{Options{ExecutePolicy: "strict", MaxExecuteAmountCents: -1}, false},
	} {
		o := tc.opts
		o.defaults()
		if err := o.Validate(); (err == nil) != tc.ok {
			t.Errorf("%+v: Validate = %v, want ok=%v", tc.opts, err, tc.ok)
		}
	}
}

func TestAPIKeys(t *testing.T) {
	c := start(t, Options{})
	created := must(c.CreateApiKey(ctx(), &agpv1.CreateApiKeyRequest{Label: "agent key", AgentId: alice, Scopes: []string{"query", "discover", "query"}}))(t)
	if len(created.GetSecret()) < 40 || created.GetSecret()[:len(agpkey.Prefix)] != agpkey.Prefix {
		t.Fatalf("secret %q: want %s and 32 random bytes", created.GetSecret(), agpkey.Prefix)
	}
	if got := created.GetKey().GetScopes(); len(got) != 2 || got[0] != "discover" || got[1] != "query" {
		t.Errorf("scopes = %v, want deduplicated and sorted [discover query]", got)
	}
	res := must(c.ResolveApiKey(ctx(), &agpv1.ResolveApiKeyRequest{KeySha256: agpkey.Hash(created.GetSecret())}))(t)
	if res.GetKey().GetAgentId() != alice || res.GetKey().GetId() != created.GetKey().GetId() {
		t.Fatalf("resolved %v, want the created key", res.GetKey())
	}
	// Only the hash is stored: the secret itself does not resolve.
	if _, err := c.ResolveApiKey(ctx(), &agpv1.ResolveApiKeyRequest{KeySha256: agpkey.Hash(created.GetSecret() + "x")}); code(err) != codes.NotFound {
		t.Errorf("unknown key: %v, want NotFound", err)
	}

	// Import replaces a key with the same id; the old secret stops working.
	must(c.ImportApiKey(ctx(), &agpv1.ImportApiKeyRequest{Id: "demo", AgentId: bob, Scopes: []string{"*"}, KeySha256: hashA}))(t)
	must(c.ImportApiKey(ctx(), &agpv1.ImportApiKeyRequest{Id: "demo", AgentId: bob, Scopes: []string{"execute"}, KeySha256: hashB}))(t)
	if _, err := c.ResolveApiKey(ctx(), &agpv1.ResolveApiKeyRequest{KeySha256: hashA}); code(err) != codes.NotFound {
		t.Errorf("replaced secret: %v, want NotFound", err)
	}
	if k := must(c.ResolveApiKey(ctx(), &agpv1.ResolveApiKeyRequest{KeySha256: hashB}))(t).GetKey(); k.GetScopes()[0] != "execute" {
		t.Errorf("imported key scopes = %v", k.GetScopes())
	}
	// The same secret under another id is refused.
	if _, err := c.ImportApiKey(ctx(), &agpv1.ImportApiKeyRequest{Id: "other", AgentId: bob, Scopes: []string{"query"}, KeySha256: hashB}); code(err) != codes.Aborted {
		t.Errorf("duplicate secret: %v, want Aborted", err)
	}

	list := must(c.ListApiKeys(ctx(), &agpv1.ListApiKeysRequest{}))(t)
	if len(list.GetKeys()) != 2 {
		t.Fatalf("list = %v, want 2 keys", list.GetKeys())
	}
	if only := must(c.ListApiKeys(ctx(), &agpv1.ListApiKeysRequest{AgentId: bob}))(t); len(only.GetKeys()) != 1 || only.GetKeys()[0].GetId() != "demo" {
		t.Errorf("list for bob = %v", only.GetKeys())
	}
	ids := []string{"demo", created.GetKey().GetId()}
	var extra []string
	for range 4 {
		k := must(c.CreateApiKey(ctx(), &agpv1.CreateApiKeyRequest{Label: "paged", AgentId: bob, Scopes: []string{"query"}}))(t)
		extra = append(extra, k.GetKey().GetId())
	}
	ids = append(ids, extra...)
	slices.Sort(ids)
	listKeys := func(agent string) testkit.ListPage {
		return func(size int32, tok string) ([]string, string, error) {
			r, err := c.ListApiKeys(ctx(), &agpv1.ListApiKeysRequest{AgentId: agent, PageSize: size, PageToken: tok})
			var got []string
			for _, k := range r.GetKeys() {
				got = append(got, k.GetId())
			}
			return got, r.GetNextPageToken(), err
		}
	}
	for _, size := range []int32{1, 2, 4} {
		tok := testkit.CheckPaging(t, size, ids, listKeys(""))
		testkit.CheckTokenMismatch(t, tok, listKeys(bob))
	}
	for _, id := range extra {
		must(c.RevokeApiKey(ctx(), &agpv1.RevokeApiKeyRequest{Id: id}))(t)
	}

	must(c.RevokeApiKey(ctx(), &agpv1.RevokeApiKeyRequest{Id: created.GetKey().GetId()}))(t)
	if _, err := c.ResolveApiKey(ctx(), &agpv1.ResolveApiKeyRequest{KeySha256: agpkey.Hash(created.GetSecret())}); code(err) != codes.NotFound {
		t.Errorf("revoked key: %v, want NotFound", err)
	}
	if _, err := c.RevokeApiKey(ctx(), &agpv1.RevokeApiKeyRequest{Id: created.GetKey().GetId()}); code(err) != codes.NotFound {
		t.Errorf("second revoke: %v, want NotFound", err)
	}

	for name, in := range map[string]*agpv1.CreateApiKeyRequest{
		"no scopes":     {AgentId: alice},
		"unknown scope": {AgentId: alice, Scopes: []string{"generate"}},
		"bad agent":     {AgentId: "alice", Scopes: []string{"query"}},
		"long label":    {AgentId: alice, Scopes: []string{"query"}, Label: string(make([]byte, 200))},
	} {
		if _, err := c.CreateApiKey(ctx(), in); code(err) != codes.InvalidArgument {
			t.Errorf("%s: %v, want InvalidArgument", name, err)
		}
	}
}

func TestConfirmationPolicies(t *testing.T) {
	clk := testkit.NewClock(time.Now())
	strict := start(t, Options{ExecutePolicy: PolicyStrict, MaxExecuteAmountCents: 1000, Now: clk.Now})
	open := start(t, Options{Now: clk.Now})

	issue := func(c agpv1.AgpServiceClient, agent, business, hash string) string {
		t.Helper()
		r := must(c.IssueConfirmation(ctx(), &agpv1.IssueConfirmationRequest{AgentId: agent, BusinessId: business, RequestSha256: hash}))(t)
		if d := r.GetExpiresAt().AsTime().Sub(clk.Now()); d < 4*time.Minute || d > 5*time.Minute {
			t.Errorf("token expires in %v, want 5m", d)
		}
		//lint:ignore SA1019 the first release's field, still filled
		if c == strict && (r.GetExecutePolicy() != agpv1.ExecutePolicy_EXECUTE_POLICY_STRICT || r.GetPolicy() != PolicyStrict) {
			t.Errorf("issued %v, want strict in both forms", r)
		}
		return r.GetToken()
	}
	consume := func(c agpv1.AgpServiceClient, in *agpv1.ConsumeConfirmationRequest) *agpv1.ConsumeConfirmationResponse {
		t.Helper()
		return must(c.ConsumeConfirmation(ctx(), in))(t)
	}
	req := func(agent, business, hash, token string) *agpv1.ConsumeConfirmationRequest {
		return &agpv1.ConsumeConfirmationRequest{AgentId: agent, BusinessId: business, RequestSha256: hash, Token: token}
	}

	t.Run("open ignores the token", func(t *testing.T) {
		r := consume(open, req(alice, "orders", hashA, ""))
		//lint:ignore SA1019 the first release's field, still filled
		if !r.GetAllowed() || r.GetExecutePolicy() != agpv1.ExecutePolicy_EXECUTE_POLICY_OPEN || r.GetPolicy() != PolicyOpen {
			t.Errorf("open without token = %v", r)
		}
		if r := consume(open, req(alice, "orders", hashA, "not-a-token")); !r.GetAllowed() {
			t.Errorf("open with a bad token = %v", r)
		}
	})
	t.Run("missing and unknown", func(t *testing.T) {
		r := consume(strict, req(alice, "orders", hashA, ""))
		//lint:ignore SA1019 the first release's field, still filled
		if r.GetAllowed() || r.GetReason() != ReasonRequired || r.GetExecutePolicy() != agpv1.ExecutePolicy_EXECUTE_POLICY_STRICT || r.GetPolicy() != PolicyStrict {
			t.Errorf("no token = %v", r)
		}
		if r := consume(strict, req(alice, "orders", hashA, "0b0e7c1e-8d4c-4a55-9d1e-2f0f6c1d2e3f")); r.GetAllowed() || r.GetReason() != ReasonInvalid {
			t.Errorf("unknown token = %v", r)
		}
	})
	t.Run("single use", func(t *testing.T) {
		tok := issue(strict, alice, "orders", hashA)
		if r := consume(strict, req(alice, "orders", hashA, tok)); !r.GetAllowed() {
			t.Fatalf("first use = %v", r)
		}
		if r := consume(strict, req(alice, "orders", hashA, tok)); r.GetAllowed() || r.GetReason() != ReasonInvalid {
			t.Errorf("second use = %v, want %s", r, ReasonInvalid)
		}
	})
	t.Run("mismatch does not consume", func(t *testing.T) {
		tok := issue(strict, alice, "orders", hashA)
		for _, bad := range []*agpv1.ConsumeConfirmationRequest{
			req(alice, "orders", hashB, tok),    // another request
			req(alice, "documents", hashA, tok), // another business
		} {
			if r := consume(strict, bad); r.GetAllowed() || r.GetReason() != ReasonMismatch {
				t.Errorf("mismatch %v = %v", bad, r)
			}
		}
		// Another caller cannot use it: its tokens are under its own tag.
		if r := consume(strict, req(bob, "orders", hashA, tok)); r.GetAllowed() || r.GetReason() != ReasonInvalid {
			t.Errorf("other caller = %v", r)
		}
		if r := consume(strict, req(alice, "orders", hashA, tok)); !r.GetAllowed() {
			t.Errorf("right request after mismatches = %v", r)
		}
	})
	t.Run("expired", func(t *testing.T) {
		tok := issue(strict, alice, "orders", hashA)
		clk.Advance(5*time.Minute + time.Second)
		r := consume(strict, req(alice, "orders", hashA, tok))
		if r.GetAllowed() || r.GetReason() != ReasonExpired || r.GetMessage() != "Confirmation token expired. Prepare a new token." {
			t.Errorf("expired = %v", r)
		}
		// An expired token is deleted when presented.
		if r := consume(strict, req(alice, "orders", hashA, tok)); r.GetReason() != ReasonInvalid {
			t.Errorf("expired, again = %v", r)
		}
	})
	t.Run("strict ceiling", func(t *testing.T) {
		tok := issue(strict, alice, "orders", hashA)
		over := req(alice, "orders", hashA, tok)
		over.AmountPresent, over.AmountCents = true, 1000.5
		if r := consume(strict, over); r.GetAllowed() || r.GetReason() != ReasonAmount {
			t.Errorf("over the ceiling = %v", r)
		}
		// The refused amount did not use the token up.
		at := req(alice, "orders", hashA, tok)
		at.AmountPresent, at.AmountCents = true, 1000
		if r := consume(strict, at); !r.GetAllowed() {
			t.Errorf("at the ceiling = %v", r)
		}
	})
	t.Run("concurrent executes consume once", func(t *testing.T) {
		tok := issue(strict, alice, "orders", hashA)
		var wg sync.WaitGroup
		var allowed atomic.Int32
		for range 16 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if r, err := strict.ConsumeConfirmation(ctx(), req(alice, "orders", hashA, tok)); err == nil && r.GetAllowed() {
					allowed.Add(1)
				}
			}()
		}
		wg.Wait()
		if allowed.Load() != 1 {
			t.Errorf("%d of 16 concurrent executes passed, want exactly 1", allowed.Load())
		}
	})
	t.Run("bad calls", func(t *testing.T) {
		for name, in := range map[string]*agpv1.ConsumeConfirmationRequest{
			"agent":    req("x", "orders", hashA, ""),
			"business": req(alice, "", hashA, ""),
			"hash":     req(alice, "orders", "abc", ""),
		} {
			if _, err := strict.ConsumeConfirmation(ctx(), in); code(err) != codes.InvalidArgument {
				t.Errorf("%s: %v, want InvalidArgument", name, err)
			}
		}
	})
}

func TestTransactions(t *testing.T) {
	c := start(t, Options{})
	id := "5f9b2cce-39ac-4ca3-83ba-892b4c4272c7"
	input, err := jsondoc.Struct([]byte(`{"businessId":"orders"}`))
	if err != nil {
		t.Fatal(err)
	}
	rec := &agpv1.Transaction{Id: id, AgentId: alice, AgpOperation: agpv1.AgpOperation_AGP_OPERATION_EXECUTE, BusinessId: "orders", State: agpv1.TransactionStatus_TRANSACTION_STATUS_SUCCEEDED,
		Input: input, Result: testkit.JSONValue(`{"order_id":"ord-1"}`), AuditId: hashA}
	must(c.PutTransaction(ctx(), &agpv1.PutTransactionRequest{Transaction: rec}))(t)
	got := must(c.GetTransaction(ctx(), &agpv1.GetTransactionRequest{AgentId: alice, TransactionId: id}))(t).GetTransaction()
	if got.GetState() != agpv1.TransactionStatus_TRANSACTION_STATUS_SUCCEEDED || got.GetAgpOperation() != agpv1.AgpOperation_AGP_OPERATION_EXECUTE ||
		string(testkit.ValueJSON(got.GetResult())) != `{"order_id":"ord-1"}` ||
		got.GetInput().GetFields()["businessId"].GetStringValue() != "orders" || got.GetAuditId() != hashA {
		t.Errorf("read back %v", got)
	}
	// A client of the first release sends and reads the status string and
	// the JSON bytes; either client reads both forms of either's record.
	//lint:ignore SA1019 the first release's fields
	if got.GetStatus() != "succeeded" || got.GetOperation() != "execute" || string(got.GetResultJson()) != `{"order_id":"ord-1"}` || string(got.GetInputJson()) != `{"businessId":"orders"}` {
		t.Errorf("first release's fields of a current client's record: %v", got)
	}
	oldID := "0b6f3b8e-6a61-4d53-9d7c-3f3f0a0e51a1"
	//lint:ignore SA1019 a client of the first release sends these fields only
	old := &agpv1.Transaction{Id: oldID, AgentId: alice, Operation: "query", Status: "failed", InputJson: []byte(`{"q":[1,2]}`), ResultJson: []byte(`"none"`)}
	must(c.PutTransaction(ctx(), &agpv1.PutTransactionRequest{Transaction: old}))(t)
	got = must(c.GetTransaction(ctx(), &agpv1.GetTransactionRequest{AgentId: alice, TransactionId: oldID}))(t).GetTransaction()
	if got.GetState() != agpv1.TransactionStatus_TRANSACTION_STATUS_FAILED || got.GetAgpOperation() != agpv1.AgpOperation_AGP_OPERATION_QUERY ||
		got.GetResult().GetStringValue() != "none" ||
		len(got.GetInput().GetFields()["q"].GetListValue().GetValues()) != 2 {
		t.Errorf("a first-release record read back %v", got)
	}
	//lint:ignore SA1019 the first release's fields
	if got.GetStatus() != "failed" || string(got.GetInputJson()) != `{"q":[1,2]}` {
		t.Errorf("first release's fields of its own record: %v", got)
	}
	// Another caller, an unknown id and a malformed id are the same miss.
	for name, in := range map[string]*agpv1.GetTransactionRequest{
		"other owner": {AgentId: bob, TransactionId: id},
		"unknown":     {AgentId: alice, TransactionId: "0b0e7c1e-8d4c-4a55-9d1e-2f0f6c1d2e3f"},
		"malformed":   {AgentId: alice, TransactionId: "../" + id},
	} {
		_, err := c.GetTransaction(ctx(), in)
		if code(err) != codes.NotFound || status.Convert(err).Message() != "No transaction exists for the provided ID." {
			t.Errorf("%s: %v, want the same NotFound", name, err)
		}
	}
	for name, bad := range map[string]*agpv1.Transaction{
		"id":                   {Id: "tx-1", AgentId: alice, Operation: "query", Status: "failed"},
		"operation":            {Id: id, AgentId: alice, Operation: "generate", Status: "failed"},
		"status":               {Id: id, AgentId: alice, Operation: "query", Status: "done"},
		"agent":                {Id: id, AgentId: "alice", Operation: "query", Status: "failed"},
		"size":                 {Id: id, AgentId: alice, Operation: "query", Status: "failed", ResultJson: make([]byte, maxJSON+1)},
		"undeclared state":     {Id: id, AgentId: alice, Operation: "query", State: 99},
		"undeclared operation": {Id: id, AgentId: alice, AgpOperation: 99, State: agpv1.TransactionStatus_TRANSACTION_STATUS_FAILED},
		"operation name case":  {Id: id, AgentId: alice, Operation: "QUERY", State: agpv1.TransactionStatus_TRANSACTION_STATUS_FAILED},
	} {
		if _, err := c.PutTransaction(ctx(), &agpv1.PutTransactionRequest{Transaction: bad}); code(err) != codes.InvalidArgument {
			t.Errorf("bad %s: %v, want InvalidArgument", name, err)
		}
	}
}
