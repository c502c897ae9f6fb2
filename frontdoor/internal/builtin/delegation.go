package builtin

import (
	"context"
	"encoding/json"
	"github.com/agtpsuite/agtp/services/textcut"
	"regexp"
	"strconv"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/agtpsuite/agtp/frontdoor/internal/callerproof"
	identityv1 "github.com/agtpsuite/agtp/proto/agtp/identity/v1"
	taskv1 "github.com/agtpsuite/agtp/proto/agtp/task/v1"
	"github.com/agtpsuite/agtp/services/agtp"
	"github.com/agtpsuite/agtp/services/jsondoc"
)

// What a DELEGATE may hand a sub-agent hosted here, and what it refuses
// before the hop is signed (docs/mechanics.md, "DELEGATE";
// docs/decisions.md#D-delegation-consent).

// Reasons of DELEGATE's own refusals.
const (
	// ReasonDelegatedCallRefused: a built-in that speaks for the
	// delegatee, changes identity or lifecycle, or reads the delegatee's
	// private state, reached through a DELEGATE (403).
	ReasonDelegatedCallRefused = "delegated-call-refused"
	reasonTaskPaused           = "task-paused"
	reasonTaskEnded            = "task-ended"
)

// delegationRefusals are the built-ins a call run through a DELEGATE may
// not reach, whatever the delegatee consented to: by method, for every
// path (nil), or for the listed path templates. The delegatee is the
// caller of such a call, and these would let the delegator act as the
// delegatee in person: attest (CONFIRM) or escalate in its name, suspend
// or resume its sessions, change an agent's lifecycle, re-run its
// requests (RETRY), delegate again (a hop here is depth 1), or read its
// inbox, tasks and notifications.
var delegationRefusals = map[string][]string{
	"CONFIRM":    nil,
	"ESCALATE":   nil,
	"DELEGATE":   nil,
	"SUSPEND":    nil,
	"RESUME":     nil,
	"RETRY":      nil,
	"ACTIVATE":   nil,
	"DEACTIVATE": nil,
	"REVOKE":     nil,
	"REINSTATE":  nil,
	"DEPRECATE":  nil,
	"QUERY":      {"/inbox", "/tasks/{task_id}", "/notifications/{notification_id}"},
}

// refusedWhenDelegated reports whether method on path (a request path or
// a path template) is a built-in a delegated call may not reach.
func refusedWhenDelegated(method, path string) bool {
	paths, listed := delegationRefusals[method]
	if !listed {
		return false
	}
	if paths == nil {
		return true
	}
	if i := strings.IndexAny(path, "?#"); i >= 0 {
		path = path[:i]
	}
	for _, tmpl := range paths {
		if pathMatches(tmpl, path) {
			return true
		}
	}
	return false
}

// pathMatches matches a path against a template whose {name} segments
// match any one non-empty segment; a trailing slash is ignored.
func pathMatches(tmpl, path string) bool {
	ts := strings.Split(strings.TrimSuffix(tmpl, "/"), "/")
	ps := strings.Split(strings.TrimSuffix(path, "/"), "/")
	if len(ts) != len(ps) {
		return false
	}
	for i, t := range ts {
		if strings.HasPrefix(t, "{") && strings.HasSuffix(t, "}") {
			if ps[i] == "" {
				return false
			}
			continue
		}
		if t != ps[i] {
			return false
		}
	}
	return true
}

// delegatedCaller reports whether the request a built-in serves is one a
// verified DELEGATE runs as its delegatee.
func delegatedCaller(call *Call) bool {
	if call.Conn == nil {
		return false
	}
	_, ok := call.Conn.Peer.(*callerproof.Delegated)
	return ok
}

// refuseWhenDelegated wraps a built-in of delegationRefusals: a call a
// DELEGATE runs is refused, 403 delegated-call-refused, before the
// built-in sees it. Every way a delegated call reaches a built-in goes
// through the table, so this is the one place that decides.
func (bi *Registry) refuseWhenDelegated(f Func) Func {
	return func(ctx context.Context, call *Call) *agtp.Response {
		if delegatedCaller(call) {
			bi.Log.WarnContext(ctx, "delegated call refused", "delegatee", call.AgentID, "method", call.Method, "template", call.Template)
			return call.Fail(agtp.StatusForbidden, ReasonDelegatedCallRefused,
				call.Method+" "+call.Template+" may not be run through a DELEGATE: it would act as the sub-agent in person (docs/mechanics.md, DELEGATE)",
				map[string]any{"method": call.Method})
		}
		return f(ctx, call)
	}
}

// delegatedCall is one AGTP call of a DELEGATE task.
type delegatedCall struct {
	Method string          `json:"method"`
	Path   string          `json:"path"`
	Body   json.RawMessage `json:"body,omitempty"`
}

const maxDelegatedCalls = 16

// parseDelegatedTask reads a DELEGATE task: one AGTP call or a list of 1
// to 16; what is wrong with it otherwise.
func parseDelegatedTask(raw []byte) ([]delegatedCall, string) {
	var calls []delegatedCall
	if err := json.Unmarshal(raw, &calls); err != nil {
		var one delegatedCall
		if err := json.Unmarshal(raw, &one); err != nil {
			return nil, "task is neither an AGTP call {method, path, body} nor a list of them"
		}
		calls = []delegatedCall{one}
	}
	if len(calls) == 0 || len(calls) > maxDelegatedCalls {
		return nil, "a task holds 1 to 16 calls"
	}
	for i, c := range calls {
		if c.Method == "" || c.Path == "" {
			return nil, "call " + strconv.Itoa(i) + " needs a method and a path"
		}
	}
	return calls, ""
}

// refusedCall refuses a task that names a built-in of
// delegationRefusals, before anything is signed or run.
func (bi *Registry) refusedCall(ctx context.Context, call *Call, delegatee string, calls []delegatedCall) *agtp.Response {
	for i, c := range calls {
		if refusedWhenDelegated(c.Method, c.Path) {
			bi.Log.WarnContext(ctx, "delegation refused: task names a refused built-in", "delegator", call.AgentID, "delegatee", delegatee, "method", c.Method)
			return call.Fail(agtp.StatusForbidden, ReasonDelegatedCallRefused,
				"call "+strconv.Itoa(i)+" ("+c.Method+" "+textcut.Cut(c.Path, maxPathInDetail)+") may not be run through a DELEGATE: it would act as the sub-agent in person (docs/mechanics.md, DELEGATE)",
				map[string]any{"method": c.Method, "call": i})
		}
	}
	return nil
}

// checkDelegateeConsent refuses a hop to a sub-agent hosted here unless
// its own identity document says it takes delegated work:
// delegation_permitted true, and max_delegation_depth, when present, at
// least 1 (a hop here is depth 1). The consent is the sub-agent's,
// stated by its issuer in its Genesis, never the delegator's. A refusal is
// 551 with the failing link, logged (docs/decisions.md#D-delegation-consent).
func (bi *Registry) checkDelegateeConsent(ctx context.Context, call *Call, delegatee string) *agtp.Response {
	broken := func(link string) *agtp.Response {
		bi.Log.WarnContext(ctx, "authority chain broken: the sub-agent does not take delegated work", "delegator", call.AgentID, "delegatee", delegatee, "link", link)
		return call.Fail(agtp.StatusAuthorityChainBroken, "authority-chain-broken", "the sub-agent does not accept this delegation: "+link,
			map[string]any{"failing_link": link})
	}
	r, err := bi.Identity.GetIdentityDocument(ctx, &identityv1.GetIdentityDocumentRequest{AgentId: delegatee, Format: agtp.FormatJSON})
	if err != nil {
		if status.Code(err) == codes.NotFound {
			return broken("delegatee consent: " + delegatee + " has no identity document on this server")
		}
		return bi.dependencyFailure(ctx, call, "identitysvc", err)
	}
	var doc struct {
		DelegationPermitted *bool    `json:"delegation_permitted"`
		MaxDelegationDepth  *float64 `json:"max_delegation_depth"`
	}
	//lint:ignore SA1019 the first release's identitysvc sends the document only as bytes
	if err := json.Unmarshal(jsondoc.PreferString(r.GetDocument(), r.GetDocumentJson()), &doc); err != nil {
		return broken("delegatee consent: the identity document of " + delegatee + " cannot be read")
	}
	switch {
	case doc.DelegationPermitted == nil || !*doc.DelegationPermitted:
		return broken("delegatee consent: the identity document of " + delegatee + " does not set delegation_permitted to true")
	case doc.MaxDelegationDepth != nil && *doc.MaxDelegationDepth < 1:
		return broken("delegatee consent: the identity document of " + delegatee + " sets max_delegation_depth " +
			strconv.FormatFloat(*doc.MaxDelegationDepth, 'f', -1, 64) + ", below this hop's depth 1")
	}
	return nil
}

// taskIDPattern is policysvc's form of a Task-ID: checked here so that a
// DELEGATE policysvc would refuse to record runs nothing.
var taskIDPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$`)

// checkDelegationTask refuses a DELEGATE of a task that may not run: one
// paused (by ESCALATE: 409 task-paused) or ended (confirmed, rejected,
// failed: 409 task-ended). It reads the task before the hop is signed or
// any call runs; a task that does not exist yet is created by the hop.
// RecordDelegation checks again when it records the hop.
func (bi *Registry) checkDelegationTask(ctx context.Context, call *Call, taskID string) *agtp.Response {
	if taskID == "" {
		return nil
	}
	if !taskIDPattern.MatchString(taskID) {
		return call.Fail(agtp.StatusBadRequest, "task-id-invalid", "task_id must be 1-128 characters of letters, digits and ._:-", nil)
	}
	r, err := bi.Tasks.GetTask(ctx, &taskv1.GetTaskRequest{CallerAgentId: call.AgentID, TaskId: taskID})
	if err != nil {
		if status.Code(err) == codes.NotFound {
			return nil
		}
		return bi.dependencyFailure(ctx, call, "policysvc", err)
	}
	switch st := taskStatus(r.GetTask()); st {
	case "escalated", "paused":
		return call.Fail(agtp.StatusConflict, reasonTaskPaused, "task "+taskID+" is paused ("+st+"): it runs no delegated work until a CONFIRM resumes it",
			map[string]any{"task_status": st})
	case "confirmed", "rejected", "failed":
		return call.Fail(agtp.StatusConflict, reasonTaskEnded, "task "+taskID+" has ended ("+st+")",
			map[string]any{"task_status": st})
	}
	return nil
}

// Bounds on what a DELEGATE writes into its task's history: a request
// path in a message, and the whole detail (policysvc's bound on a history
// detail, which RecordDelegation also applies).
const (
	maxPathInDetail = 128
	maxHopDetail    = 1024
)
