// Package builtin holds the front door's built-in methods: the
// protocol-native (Tier A) endpoints the catalog binds to agtp.builtin.*
// functions (DISCOVER, DESCRIBE, INSPECT, PROPOSE, QUOTE, the lifecycle
// methods, SUSPEND, RESUME, RETRY, MONITOR and the mechanics verbs of core
// §7.2.9–§7.2.13). They are registered in a table keyed by method and
// path template, the way handler.Registry keys registered functions by
// name, and each is given a Call: what it may know of its request, not
// the pipeline's state.
package builtin

import (
	"context"
	"encoding/json"
	"log/slog"
	"strconv"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/agtpsuite/agtp/auditsvc/attribution"
	"github.com/agtpsuite/agtp/auditsvc/inspect"
	"github.com/agtpsuite/agtp/frontdoor/internal/agentcache"
	"github.com/agtpsuite/agtp/frontdoor/internal/answer"
	"github.com/agtpsuite/agtp/frontdoor/internal/callerproof"
	"github.com/agtpsuite/agtp/frontdoor/internal/catalogstate"
	"github.com/agtpsuite/agtp/frontdoor/internal/coreparam"
	auditv1 "github.com/agtpsuite/agtp/proto/agtp/audit/v1"
	identityv1 "github.com/agtpsuite/agtp/proto/agtp/identity/v1"
	policyv1 "github.com/agtpsuite/agtp/proto/agtp/policy/v1"
	rcnsv1 "github.com/agtpsuite/agtp/proto/agtp/rcns/v1"
	taskv1 "github.com/agtpsuite/agtp/proto/agtp/task/v1"
	"github.com/agtpsuite/agtp/rcnssvc/recipe"
	"github.com/agtpsuite/agtp/services/agtp"
	"github.com/agtpsuite/agtp/services/agtp/client"
	"github.com/agtpsuite/agtp/services/agtp/transport"
	"github.com/agtpsuite/agtp/services/enumname"
	"github.com/agtpsuite/agtp/services/jsondoc"
)

// Func runs one built-in.
type Func func(ctx context.Context, call *Call) *agtp.Response

// Call is what a built-in is given of its request, and what it leaves for
// the response's record.
type Call struct {
	// Method and Template are the matched endpoint's method and path
	// template; Path is the request's path and RawQuery its query string.
	Method, Template, Path, RawQuery string
	// Input is the validated input object; Params is the same, decoded.
	Input  []byte
	Params map[string]any
	// Core are the request's core per-method parameters (core §7.2:
	// QUERY's intent, PLAN's goal, ...; docs/decisions.md#D-core-parameters),
	// validated and kept out of Input; nil when it sent none. A member
	// the endpoint's input schema declares is in Input instead.
	Core coreparam.Params
	// Header is the request's header (read only).
	Header *agtp.Header
	// Conn is the connection the request came on; Peer is what its client
	// certificate proved (nil without one).
	Conn *transport.ConnInfo
	Peer *callerproof.Peer
	// State is the catalog snapshot the request was decided on.
	State *catalogstate.State

	// AgentID is the proven caller ("" when anonymous), Caller its
	// record, ProofLevel how it was proven (callerproof levels) and
	// Scopes its effective Authority-Scope.
	AgentID    string
	Caller     *identityv1.AgentRecord
	ProofLevel int
	Scopes     []string

	// Target is the agent the request addresses (DESCRIBE of an agent),
	// for the trust headers of the response.
	Target *identityv1.AgentRecord
	// Synthesis names the synthesized contract a PROPOSE issued, for the
	// Attribution-Record.
	Synthesis Synthesis
	// Priors are the records of requests the built-in ran on the
	// caller's behalf (RETRY's re-run), the record's prior_actions.
	Priors []attribution.PriorAction
	// Rejection is the reason of the error answer, for metrics.
	Rejection string
}

// Synthesis names a synthesized contract in an Attribution-Record.
type Synthesis struct {
	ID, ContractHash, NegotiationOrigin string
}

// Fail builds an error answer and notes its reason.
func (c *Call) Fail(status int, reason, explanation string, extra map[string]any) *agtp.Response {
	c.Rejection = reason
	return answer.Error(c.Header.Get(agtp.HeaderTaskID), status, reason, explanation, extra)
}

// RCNSCaller is the caller as rcnssvc judges it.
func (c *Call) RCNSCaller() *rcnsv1.Caller {
	return &rcnsv1.Caller{
		AgentId:   c.AgentID,
		SessionId: c.Header.Get(agtp.HeaderSessionID),
		Scopes:    c.Scopes,
		TrustTier: c.Caller.GetTrustTier(),
	}
}

// clientKeyFingerprint is the Genesis-issuer form of the TLS client
// certificate's key (core §7.2.19), "" without one.
func (c *Call) clientKeyFingerprint() string {
	if c.Peer != nil {
		return c.Peer.KeyFingerprint
	}
	return ""
}

// Deps are what the built-ins call.
type Deps struct {
	// ServerID names this server in what it sends others (an
	// escalation pushed to a webhook).
	ServerID string
	Agents   *agentcache.Cache
	Policy   policyv1.PolicyServiceClient
	Audit    auditv1.AuditServiceClient
	Identity identityv1.IdentityServiceClient
	// RCNS is nil when this server runs no contract negotiation.
	RCNS rcnsv1.RcnsServiceClient
	// Tasks is policysvc's task service; nil answers the mechanics verbs
	// 501.
	Tasks taskv1.TaskServiceClient
	// Peers is the AGTP client for other servers; nil answers a DELEGATE
	// hop to another host 550.
	Peers *client.Client
	// Outbound decides which caller-named destinations may be reached;
	// nil reaches none.
	Outbound *Outbound
	// ACL is INSPECT's read ACL.
	ACL inspect.ACL
	// Costs is what QUOTE estimates from.
	Costs *Costs
	Log   *slog.Logger
	// DropSession forgets a confirmed Session-ID binding (after SUSPEND
	// or RESUME).
	DropSession func(sessionID string)
	// Serve runs a request through the whole pipeline on conn (a
	// DELEGATE's calls, as the sub-agent).
	Serve func(ctx context.Context, conn *transport.ConnInfo, req *agtp.Request) *agtp.Response
	// ServeInner runs a request through the pipeline within the
	// parent's connection (RETRY's re-run).
	ServeInner func(ctx context.Context, conn *transport.ConnInfo, req *agtp.Request) *agtp.Response
	// Recipe resolves a composition's recipe, for the calls it makes
	// (QUERY / and PLAN /); nil leaves compositions without their steps.
	Recipe func(ctx context.Context, name string) (*recipe.Recipe, error)
}

// AnyPath registers a built-in for every path of its method that has no
// entry of its own.
const AnyPath = "*"

type key struct{ method, path string }

// Registry is the table of built-ins.
type Registry struct {
	Deps
	table map[key]Func
	// prepared is the latest catalog snapshot's endpoints prepared for
	// intent resolution (intent.go).
	prepared atomic.Pointer[preparedSet]
}

// New builds the table.
func New(deps Deps) *Registry {
	bi := &Registry{Deps: deps}
	if bi.Costs == nil {
		bi.Costs = NewCosts()
	}
	bi.table = map[key]Func{
		{"DISCOVER", "/"}:          bi.discoverRoot,
		{"DISCOVER", "/methods"}:   bi.discoverMethods,
		{"DISCOVER", "/agents"}:    bi.discoverAgents,
		{"DISCOVER", "/genesis"}:   bi.discoverGenesis,
		{"DISCOVER", "/tools"}:     bi.discoverNone,
		{"DISCOVER", "/apis"}:      bi.discoverNone,
		{"DISCOVER", "/patterns"}:  bi.discoverPatterns,
		{"DISCOVER", "/contracts"}: bi.discoverContracts,
		{"DISCOVER", AnyPath}:      bi.discoverUnknown,

		{"DESCRIBE", "/"}:         bi.describeServer,
		{"DESCRIBE", "/merchant"}: bi.describeMerchant,
		{"DESCRIBE", "/agents"}:   bi.describeNamespace,
		{"DESCRIBE", AnyPath}:     bi.describeAgent,

		{"QUERY", "/"}:                                bi.queryIntent,
		{"PLAN", "/"}:                                 bi.plan,
		{"SUMMARIZE", "/"}:                            bi.listMethod,
		{"EXECUTE", "/"}:                              bi.listMethod,
		{"QUERY", "/proposals/{proposal_id}"}:         bi.proposal,
		{"QUERY", "/tasks/{task_id}"}:                 bi.queryTask,
		{"QUERY", "/notifications/{notification_id}"}: bi.queryNotification,
		{"QUERY", "/inbox"}:                           bi.queryInbox,

		{"INSPECT", AnyPath}:    bi.inspect,
		{"ACTIVATE", AnyPath}:   bi.lifecycle,
		{"DEACTIVATE", AnyPath}: bi.lifecycle,
		{"REINSTATE", AnyPath}:  bi.lifecycle,
		{"REVOKE", AnyPath}:     bi.lifecycle,
		{"DEPRECATE", AnyPath}:  bi.lifecycle,
		{"PROPOSE", AnyPath}:    bi.propose,
		{"QUOTE", AnyPath}:      bi.quote,
		{"SUSPEND", AnyPath}:    bi.suspend,
		{"RESUME", AnyPath}:     bi.resume,
		{"ESCALATE", AnyPath}:   bi.escalate,
		{"CONFIRM", AnyPath}:    bi.confirm,
		{"NOTIFY", AnyPath}:     bi.notify,
		{"DELEGATE", AnyPath}:   bi.delegate,
		{"RETRY", AnyPath}:      bi.retry,
		{"MONITOR", AnyPath}:    bi.monitor,
	}
	// The built-ins a DELEGATE's calls may not reach refuse them here,
	// whatever path they were reached by (delegation.go).
	for k, f := range bi.table {
		if refusedWhenDelegated(k.method, k.path) {
			bi.table[k] = bi.refuseWhenDelegated(f)
		}
	}
	return bi
}

// Lookup finds the built-in of an endpoint: the entry for its method and
// path template, else its method's AnyPath entry.
func (bi *Registry) Lookup(method, template string) (Func, bool) {
	if f, ok := bi.table[key{method, template}]; ok {
		return f, true
	}
	f, ok := bi.table[key{method, AnyPath}]
	return f, ok
}

// dependencyFailure answers a failed call to an internal service
// (answer.Dependency).
func (bi *Registry) dependencyFailure(ctx context.Context, call *Call, service string, err error) *agtp.Response {
	f := answer.Dependency(ctx, bi.Log, service, err)
	return call.Fail(f.Status, f.Reason, f.Explanation, f.Extra)
}

// jsonResponse answers with v as a JSON body.
func jsonResponse(call *Call, status int, contentType string, v any) *agtp.Response {
	resp, err := answer.JSON(status, contentType, v)
	if err != nil {
		return call.Fail(agtp.StatusServerError, "internal", "the response could not be encoded", nil)
	}
	return resp
}

// envelopeResponse answers 200 with result in core §5.7's response
// envelope (status, task_id, result).
func envelopeResponse(call *Call, result any) *agtp.Response {
	return jsonResponse(call, agtp.StatusOK, agtp.MediaTypeJSON, map[string]any{
		"status":  agtp.StatusOK,
		"task_id": call.Header.Get(agtp.HeaderTaskID),
		"result":  result,
	})
}

// str reads a parameter as a string: a string as it is, a number in its
// shortest form; "" for anything else.
func str(params map[string]any, name string) string {
	switch v := params[name].(type) {
	case string:
		return v
	case json.Number:
		return v.String()
	case float64:
		return strconv.FormatFloat(v, 'f', -1, 64)
	}
	return ""
}

// intParam reads an optional integer parameter within [lo, hi]; absent
// is 0.
func intParam(params map[string]any, name string, lo, hi int) (int, bool) {
	v, present := params[name]
	if !present || v == nil {
		return 0, true
	}
	f, ok := v.(float64)
	if !ok || f != float64(int(f)) || int(f) < lo || int(f) > hi {
		return 0, false
	}
	return int(f), true
}

func rawParam(params map[string]any, name string) []byte {
	v, ok := params[name]
	if !ok || v == nil {
		return nil
	}
	b, _ := json.Marshal(v)
	return b
}

// valueParam is a JSON parameter as a google.protobuf.Value, nil when
// absent or null (policysvc then refuses the missing value).
func valueParam(params map[string]any, name string) *structpb.Value {
	v, err := jsondoc.Value(rawParam(params, name))
	if err != nil {
		return nil
	}
	return v
}

// enumParam is a string parameter as the value of enum E it names (as
// enumname names values), the zero value when it is absent. A name E
// does not have is refused here with 400 <name>-invalid (underscores as
// hyphens: delivery-guarantee-invalid), the reason policysvc gives: sent
// as the zero value it would read as absent.
func enumParam[E enumname.Enum](call *Call, name string) (E, *agtp.Response) {
	s := str(call.Params, name)
	v := enumname.Value[E](s)
	if s != "" && v == 0 {
		reason, msg := enumname.Refusal[E](name)
		return 0, call.Fail(agtp.StatusBadRequest, reason, msg, nil)
	}
	return v, nil
}

// rfc3339 reads an optional RFC 3339 time parameter.
func rfc3339(ctx context.Context, call *Call, params map[string]any, name string) (*timestamppb.Timestamp, *agtp.Response) {
	v := str(params, name)
	if v == "" {
		return nil, nil
	}
	t, err := time.Parse(time.RFC3339, v)
	if err != nil {
		return nil, call.Fail(agtp.StatusBadRequest, name+"-invalid", name+" must be an RFC 3339 time", nil)
	}
	return timestamppb.New(t), nil
}

func timeString(ts *timestamppb.Timestamp) string {
	if ts == nil {
		return ""
	}
	return ts.AsTime().UTC().Format(time.RFC3339Nano)
}
