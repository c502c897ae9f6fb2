package console

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"html/template"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/agtpsuite/agtp/auditsvc/auditclient"
	"github.com/agtpsuite/agtp/identitysvc/callerpolicy"
	agpv1 "github.com/agtpsuite/agtp/proto/agtp/agp/v1"
	auditv1 "github.com/agtpsuite/agtp/proto/agtp/audit/v1"
	catalogv1 "github.com/agtpsuite/agtp/proto/agtp/catalog/v1"
	identityv1 "github.com/agtpsuite/agtp/proto/agtp/identity/v1"
	rcnsv1 "github.com/agtpsuite/agtp/proto/agtp/rcns/v1"
	taskv1 "github.com/agtpsuite/agtp/proto/agtp/task/v1"
	"github.com/agtpsuite/agtp/services/enumname"
	"github.com/agtpsuite/agtp/services/jsondoc"
)

// maxReason bounds a reason a person types.
const maxReason = 1024

// Page is one page of a list and the token of the next. The console pages
// every list, so a page never holds a whole registry: the List RPCs page
// themselves (AIP-158 page_size, page_token, next_page_token) and the
// console passes their tokens through; listPage pages what a service
// answers whole (the catalog snapshot).
type Page[T any] struct {
	Items []T
	// Next is the token of the next page; empty on the last.
	Next string
}

// listPage pages a list a service returned whole, with offset tokens.
func listPage[T any](all []T, token string, size int) (Page[T], error) {
	off := 0
	if token != "" {
		n, err := strconv.Atoi(token)
		if err != nil || n < 0 || n > len(all) {
			return Page[T]{}, badRequest("the page token is not valid; start from the first page")
		}
		off = n
	}
	end := min(off+size, len(all))
	p := Page[T]{Items: all[off:end]}
	if end < len(all) {
		p.Next = strconv.Itoa(end)
	}
	return p, nil
}

// scanPageSize is the page a filtered list reads from a service, and
// scanPages bounds how many such pages one page of the console reads: a
// filter that matches little shows a short page (with a next page) after
// scanPages*scanPageSize records rather than reading a whole registry.
const (
	scanPageSize = 100
	scanPages    = 10
)

// FilteredPage is a page of a filtered list: Scanned says how many
// records were read for it.
type FilteredPage[T any] struct {
	Page[T]
	Scanned int
}

// filteredPage fills a page of size records that match keep, reading the
// service's pages through fetch (AIP-158 tokens) from where token says:
// the service's page token and how many of that page's records were
// already shown, so the next console page resumes inside a service page.
func filteredPage[T any](fetch func(token string) ([]T, string, error), keep func(T) bool, token string, size int) (FilteredPage[T], error) {
	upstream, skip, err := parseScanToken(token)
	if err != nil {
		return FilteredPage[T]{}, err
	}
	var p FilteredPage[T]
	for range scanPages {
		items, next, err := fetch(upstream)
		if err != nil {
			return FilteredPage[T]{}, err
		}
		if skip > len(items) {
			return FilteredPage[T]{}, badRequest("the page token is not valid; start from the first page")
		}
		for i := skip; i < len(items); i++ {
			p.Scanned++
			if !keep(items[i]) {
				continue
			}
			p.Items = append(p.Items, items[i])
			if len(p.Items) == size {
				if i+1 < len(items) || next != "" {
					p.Next = scanToken(upstream, i+1)
					if i+1 == len(items) {
						p.Next = scanToken(next, 0)
					}
				}
				return p, nil
			}
		}
		if next == "" {
			return p, nil
		}
		upstream, skip = next, 0
	}
	// The bound: a short page, and the next one goes on from here.
	p.Next = scanToken(upstream, 0)
	return p, nil
}

// scanToken is a service's page token and an offset into that page, as
// one opaque token.
func scanToken(upstream string, skip int) string {
	return base64.RawURLEncoding.EncodeToString([]byte(strconv.Itoa(skip) + ":" + upstream))
}

func parseScanToken(t string) (string, int, error) {
	if t == "" {
		return "", 0, nil
	}
	b, err := base64.RawURLEncoding.DecodeString(t)
	n, upstream, ok := strings.Cut(string(b), ":")
	skip, aerr := strconv.Atoi(n)
	if err != nil || !ok || aerr != nil || skip < 0 || skip > 1000 {
		return "", 0, badRequest("the page token is not valid; start from the first page")
	}
	return upstream, skip, nil
}

// escalationRow is one escalation as the queue shows it.
type escalationRow struct {
	E *taskv1.Escalation
	// Status and Priority are named from the enums, or from the first
	// release's strings.
	Status, Priority string
	Age              string
	// Resolved is set once the signed-in person resolved it; Signed is
	// then the Audit-ID of the signed event that records it
	// (policysvc signs it into the agent's lifecycle stream).
	Resolved, Signed string
	CSRF             string
}

func (c *Console) escalationsPage(w http.ResponseWriter, r *http.Request, se session) error {
	ctx, cancel := c.rpc(r, se)
	defer cancel()
	res, err := c.tasks.ListEscalations(ctx, &taskv1.ListEscalationsRequest{Principal: se.person,
		PageSize: int32(c.cfg.PageSize), PageToken: r.URL.Query().Get("page")})
	if err != nil {
		return err
	}
	list := res.GetEscalations()
	// Pending ones first on the page (deferred ones wait for a second
	// look), each group oldest first as listed.
	slices.SortStableFunc(list, func(a, b *taskv1.Escalation) int {
		return boolRank(escalationStatus(a) != "pending_review") - boolRank(escalationStatus(b) != "pending_review")
	})
	rows := make([]escalationRow, 0, len(list))
	for _, e := range list {
		rows = append(rows, c.escalationRow(e, se))
	}
	return c.page(w, "escalations", "escalations", "Escalations", se, map[string]any{"Rows": rows, "Next": res.GetNextPageToken()})
}

func (c *Console) escalationRow(e *taskv1.Escalation, se session) escalationRow {
	//lint:ignore SA1019 the first release's policysvc sends the priority only as a string
	priority := enumname.Prefer(e.GetPriorityLevel(), e.GetPriority())
	return escalationRow{E: e, Status: escalationStatus(e), Priority: priority, Age: age(c.now(), e.GetCreatedAt()), CSRF: se.csrf}
}

// escalationStatus names an escalation's state from the enum, or from
// the first release's string.
func escalationStatus(e *taskv1.Escalation) string {
	//lint:ignore SA1019 the first release's policysvc sends the state only as a string
	return enumname.Prefer(e.GetState(), e.GetStatus())
}

func boolRank(b bool) int {
	if b {
		return 1
	}
	return 0
}

// resolutions are the answers a person may give an escalation
// (core §7.2.11 CONFIRM statuses).
var resolutions = map[string]bool{"accepted": true, "rejected": true, "deferred": true}

func (c *Console) resolveEscalation(w http.ResponseWriter, r *http.Request, se session) error {
	st, reason := r.PostForm.Get("status"), strings.TrimSpace(r.PostForm.Get("reason"))
	if !resolutions[st] {
		return badRequest("choose approve, deny or defer")
	}
	if len(reason) > maxReason {
		return badRequest("the reason is too long (at most 1024 characters)")
	}
	if st == "rejected" && reason == "" {
		return badRequest("say why the escalation is denied")
	}
	ctx, cancel := c.rpc(r, se)
	defer cancel()
	res, err := c.tasks.ResolveEscalation(ctx, &taskv1.ResolveEscalationRequest{Principal: se.person, EscalationId: r.PathValue("id"),
		Outcome: enumname.Value[taskv1.ConfirmationOutcome](st), Reason: reason})
	if err != nil {
		return err
	}
	c.log.InfoContext(r.Context(), "escalation resolved", "escalation_id", r.PathValue("id"), "status", st, "person", se.person)
	row := c.escalationRow(res.GetEscalation(), se)
	row.Resolved = st + " by " + se.person
	if h := res.GetTask().GetHistory(); len(h) > 0 {
		row.Signed = h[len(h)-1].GetRef()
	}
	return c.done(w, r, "/", "escalation-row", row)
}

// filterStates are the lifecycle states the agents page filters by, in
// the order it offers them; the names are callerpolicy's, as everywhere
// an agent's state is shown.
var filterStates = []string{callerpolicy.StateActive, callerpolicy.StateSuspended, callerpolicy.StateDeprecated, callerpolicy.StateRetired}

// agentFilter is what the agents page filters by; zero fields match
// every agent.
type agentFilter struct {
	// Search is part of the agent's name or Agent-ID.
	Search              string
	Status, Owner, Zone string
	// Tier is the trust tier; -1 for any.
	Tier int
}

func (f agentFilter) matches(a *identityv1.AgentRecord) bool {
	switch {
	case f.Search != "" && !strings.Contains(strings.ToLower(a.GetName()), strings.ToLower(f.Search)) && !strings.Contains(a.GetAgentId(), strings.ToLower(f.Search)):
		return false
	case f.Status != "" && callerpolicy.StateName(a.GetStatus()) != f.Status:
		return false
	case f.Owner != "" && !strings.Contains(a.GetOwner(), f.Owner) && !strings.Contains(a.GetOwnerId(), f.Owner):
		return false
	case f.Zone != "" && a.GetGovernanceZone() != f.Zone:
		return false
	case f.Tier >= 0 && int(a.GetTrustTier()) != f.Tier:
		return false
	}
	return true
}

func (c *Console) agentsPage(w http.ResponseWriter, r *http.Request, se session) error {
	q := r.URL.Query()
	f := agentFilter{Search: strings.TrimSpace(q.Get("q")), Status: q.Get("status"), Owner: strings.TrimSpace(q.Get("owner")), Zone: strings.TrimSpace(q.Get("zone")), Tier: -1}
	if f.Status != "" && !slices.Contains(filterStates, f.Status) {
		return badRequest("status is one of " + strings.Join(filterStates, ", "))
	}
	if t := q.Get("tier"); t != "" {
		n, err := strconv.Atoi(t)
		if err != nil || n < 0 || n > 9 {
			return badRequest("tier is a trust tier: a digit")
		}
		f.Tier = n
	}
	if len(f.Search) > maxReason || len(f.Owner) > maxReason || len(f.Zone) > maxReason {
		return badRequest("the filter is too long")
	}
	ctx, cancel := c.rpc(r, se)
	defer cancel()
	// The console filters, reading on through identitysvc's pages so that
	// a page is full whenever enough agents match (filteredPage).
	// identitysvc's active_only is the namespace's rule (active, and never
	// Tier 3), not the status filter: it would hide active experimental
	// agents.
	fetch := func(token string) ([]*identityv1.AgentRecord, string, error) {
		res, err := c.agents.ListAgents(ctx, &identityv1.ListAgentsRequest{PageSize: scanPageSize, PageToken: token})
		return res.GetAgents(), res.GetNextPageToken(), err
	}
	pg, err := filteredPage(fetch, f.matches, q.Get("page"), c.cfg.PageSize)
	if err != nil {
		return err
	}
	tier := ""
	if f.Tier >= 0 {
		tier = strconv.Itoa(f.Tier)
	}
	return c.page(w, "agents", "agents", "Agents", se, map[string]any{"Agents": pg.Items, "Next": pg.Next, "Scanned": pg.Scanned,
		"Search": f.Search, "Status": f.Status, "Owner": f.Owner, "Zone": f.Zone, "Tier": tier})
}

// transitions are the lifecycle changes the console offers, by form
// value.
var transitions = map[string]identityv1.LifecycleTransition{
	"suspend":   identityv1.LifecycleTransition_LIFECYCLE_TRANSITION_DEACTIVATE,
	"reinstate": identityv1.LifecycleTransition_LIFECYCLE_TRANSITION_REINSTATE,
	"deprecate": identityv1.LifecycleTransition_LIFECYCLE_TRANSITION_DEPRECATE,
	"revoke":    identityv1.LifecycleTransition_LIFECYCLE_TRANSITION_REVOKE,
}

func (c *Console) agentPage(w http.ResponseWriter, r *http.Request, se session) error {
	id := r.PathValue("id")
	ctx, cancel := c.rpc(r, se)
	defer cancel()
	ag, err := c.agents.ResolveAgent(ctx, &identityv1.ResolveAgentRequest{AgentId: id})
	if err != nil {
		return err
	}
	d := map[string]any{"Agent": ag.GetAgent()}
	if g, err := c.agents.GetGenesis(ctx, &identityv1.GetGenesisRequest{AgentId: id}); err == nil {
		//lint:ignore SA1019 the first release's identitysvc sends the Genesis only as bytes
		d["Genesis"] = indentJSON(jsondoc.PreferString(g.GetGenesis(), g.GetGenesisJson()))
	}
	if doc, err := c.agents.GetIdentityDocument(ctx, &identityv1.GetIdentityDocumentRequest{AgentId: id, Format: "json"}); err == nil {
		//lint:ignore SA1019 the first release's identitysvc sends the document only as bytes
		d["Document"] = indentJSON(jsondoc.PreferString(doc.GetDocument(), doc.GetDocumentJson()))
	}
	if cert, err := c.agents.GetIdentityDocument(ctx, &identityv1.GetIdentityDocumentRequest{AgentId: id, Format: "certificate"}); err == nil {
		//lint:ignore SA1019 the first release's identitysvc sends the document only as bytes
		d["Certificate"] = indentJSON(jsondoc.PreferString(cert.GetDocument(), cert.GetDocumentJson()))
	}
	ev, err := c.audit.ListLifecycleEvents(ctx, &auditv1.ListLifecycleEventsRequest{AgentId: id, PageSize: int32(c.cfg.PageSize), PageToken: r.URL.Query().Get("events")})
	if err != nil && status.Code(err) != codes.NotFound {
		return err
	}
	var events []map[string]any
	for _, e := range ev.GetEvents() {
		//lint:ignore SA1019 the first release's auditsvc sends the payload only as JSON bytes
		p, _ := auditclient.Payload(e.GetPayload(), e.GetPayloadJson())
		events = append(events, map[string]any{"E": e, "Payload": p})
	}
	d["Events"], d["NextEvents"] = events, ev.GetNextPageToken()
	d["Confirm"] = confirmWord(ag.GetAgent())
	return c.page(w, "agent", "agents", "Agent "+ag.GetAgent().GetName(), se, d)
}

// confirmWord is what a person types to confirm a lifecycle change: the
// agent's name, or its Agent-ID when it has none.
func confirmWord(a *identityv1.AgentRecord) string {
	if a.GetName() != "" {
		return a.GetName()
	}
	return a.GetAgentId()
}

func (c *Console) transition(w http.ResponseWriter, r *http.Request, se session) error {
	id := r.PathValue("id")
	tr, ok := transitions[r.PostForm.Get("transition")]
	if !ok {
		return badRequest("choose suspend, reinstate, deprecate or revoke")
	}
	reason := strings.TrimSpace(r.PostForm.Get("reason"))
	if reason == "" || len(reason) > maxReason {
		return badRequest("give a reason (at most 1024 characters)")
	}
	ctx, cancel := c.rpc(r, se)
	defer cancel()
	ag, err := c.agents.ResolveAgent(ctx, &identityv1.ResolveAgentRequest{AgentId: id})
	if err != nil {
		return err
	}
	if r.PostForm.Get("confirm") != confirmWord(ag.GetAgent()) {
		return badRequest(fmt.Sprintf("type %q to confirm", confirmWord(ag.GetAgent())))
	}
	if _, err := c.agents.TransitionLifecycle(ctx, &identityv1.TransitionLifecycleRequest{AgentId: id, Transition: tr, Reason: reason}); err != nil {
		return err
	}
	c.log.InfoContext(r.Context(), "agent lifecycle changed", "agent_id", id, "transition", r.PostForm.Get("transition"), "person", se.person)
	http.Redirect(w, r, "/agents/"+id, http.StatusSeeOther)
	return nil
}

func (c *Console) endpointsPage(w http.ResponseWriter, r *http.Request, se session) error {
	ctx, cancel := c.rpc(r, se)
	defer cancel()
	snap, err := c.catalog.GetSnapshot(ctx, &catalogv1.GetSnapshotRequest{})
	if err != nil {
		return err
	}
	pg, err := listPage(snap.GetSnapshot().GetEndpoints(), r.URL.Query().Get("page"), c.cfg.PageSize)
	if err != nil {
		return err
	}
	type row struct {
		E          *catalogv1.Endpoint
		Definition string
	}
	rows := make([]row, 0, len(pg.Items))
	for _, e := range pg.Items {
		//lint:ignore SA1019 the first release's catalogsvc sends the definition only as bytes
		def, err := jsondoc.PreferStruct(e.GetDefinition(), e.GetDefinitionJson())
		if err != nil {
			return err
		}
		rows = append(rows, row{E: e, Definition: indentJSON(def)})
	}
	return c.page(w, "endpoints", "endpoints", "Endpoints", se, map[string]any{
		"Rows": rows, "Next": pg.Next, "Version": snap.GetSnapshot().GetCatalogVersion(), "Revision": snap.GetSnapshot().GetRevision()})
}

func (c *Console) accessPage(w http.ResponseWriter, r *http.Request, se session) error {
	q := r.URL.Query()
	ctx, cancel := c.rpc(r, se)
	defer cancel()
	keys, err := c.agpKeys.ListApiKeys(ctx, &agpv1.ListApiKeysRequest{AgentId: q.Get("agent"), PageSize: int32(c.cfg.PageSize), PageToken: q.Get("keys")})
	if err != nil {
		return err
	}
	cons, err := c.rcns.ListContracts(ctx, &rcnsv1.ListContractsRequest{PageSize: int32(c.cfg.PageSize), PageToken: q.Get("contracts")})
	if err != nil {
		return err
	}
	return c.page(w, "access", "access", "Access", se, map[string]any{
		"Keys":      Page[*agpv1.ApiKey]{Items: keys.GetKeys(), Next: keys.GetNextPageToken()},
		"Contracts": Page[*rcnsv1.Contract]{Items: cons.GetContracts(), Next: cons.GetNextPageToken()},
		"Agent":     q.Get("agent")})
}

func (c *Console) revokeKey(w http.ResponseWriter, r *http.Request, se session) error {
	ctx, cancel := c.rpc(r, se)
	defer cancel()
	if _, err := c.agpKeys.RevokeApiKey(ctx, &agpv1.RevokeApiKeyRequest{Id: r.PathValue("id")}); err != nil {
		return err
	}
	c.log.InfoContext(r.Context(), "agp key revoked", "key_id", r.PathValue("id"), "person", se.person)
	return c.done(w, r, "/access", "revoked", map[string]any{"What": "key " + r.PathValue("id"), "Person": se.person})
}

func (c *Console) revokeContract(w http.ResponseWriter, r *http.Request, se session) error {
	reason := strings.TrimSpace(r.PostForm.Get("reason"))
	if reason == "" || len(reason) > maxReason {
		return badRequest("give a reason (at most 1024 characters)")
	}
	ctx, cancel := c.rpc(r, se)
	defer cancel()
	if _, err := c.rcns.RevokeContract(ctx, &rcnsv1.RevokeContractRequest{SynthesisId: r.PathValue("id"), Reason: reason}); err != nil {
		return err
	}
	c.log.InfoContext(r.Context(), "contract revoked", "synthesis_id", r.PathValue("id"), "person", se.person)
	return c.done(w, r, "/access", "revoked", map[string]any{"What": "contract " + r.PathValue("id"), "Person": se.person})
}

func (c *Console) healthPage(w http.ResponseWriter, r *http.Request, se session) error {
	type row struct {
		Name, Status, Detail string
		Rates                rates
	}
	rows := make([]row, 0, len(peerNames))
	for _, p := range peerNames {
		ctx, cancel := c.rpc(r, se)
		res, err := healthpb.NewHealthClient(c.conns[p]).Check(ctx, &healthpb.HealthCheckRequest{})
		cancel()
		rw := row{Name: p, Rates: c.metrics.rates(p)}
		if err != nil {
			rw.Status, rw.Detail = "UNREACHABLE", status.Convert(err).Message()
		} else {
			rw.Status = res.GetStatus().String()
		}
		rows = append(rows, rw)
	}
	return c.page(w, "health", "health", "Health", se, map[string]any{"Rows": rows, "Interval": c.cfg.MetricsInterval})
}

// age is how long ago t was, coarsely.
func age(now time.Time, t *timestamppb.Timestamp) string {
	if t == nil {
		return ""
	}
	d := now.Sub(t.AsTime())
	switch {
	case d < time.Minute:
		return strconv.Itoa(int(d.Seconds())) + " s"
	case d < time.Hour:
		return strconv.Itoa(int(d.Minutes())) + " min"
	case d < 48*time.Hour:
		return strconv.Itoa(int(d.Hours())) + " h"
	}
	return strconv.Itoa(int(d.Hours()/24)) + " d"
}

func indentJSON(b []byte) string {
	var out bytes.Buffer
	if json.Indent(&out, b, "", "  ") != nil {
		return string(b)
	}
	return out.String()
}

var funcs = template.FuncMap{
	"json": func(b []byte) string { return indentJSON(b) },
	"time": func(t *timestamppb.Timestamp) string {
		if t == nil {
			return ""
		}
		return t.AsTime().UTC().Format(time.RFC3339)
	},
	"status": callerpolicy.StateName,
	"states": func() []string { return filterStates },
	"list":   func(s ...string) []string { return s },
	"rate":   func(v float64) string { return strconv.FormatFloat(v, 'f', 2, 64) },
	"short": func(s string) string {
		if len(s) > 16 {
			return s[:16] + "…"
		}
		return s
	},
}
