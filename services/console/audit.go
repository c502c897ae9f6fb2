package console

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/agtpsuite/agtp/auditsvc/attribution"
	"github.com/agtpsuite/agtp/auditsvc/auditclient"
	auditv1 "github.com/agtpsuite/agtp/proto/agtp/audit/v1"
	"github.com/agtpsuite/agtp/services/jsondoc"
)

// maxDepth bounds how many records one verification walks.
const maxDepth = 1000

// genesisLink is the previous_audit_id of a chain's first record.
const genesisLink = attribution.ZeroAuditID

// chainRecord is one record as the audit page shows it.
type chainRecord struct {
	R       *auditv1.Record
	Payload map[string]any
	// Previous is the record it links to.
	Previous string
}

func (r chainRecord) Field(name string) string {
	v, ok := r.Payload[name]
	if !ok || v == nil {
		return ""
	}
	if s, ok := v.(string); ok {
		return s
	}
	b, _ := json.Marshal(v)
	return string(b)
}

// verification is the result of walking a chain from its head.
type verification struct {
	Depth    int
	Verified int
	OK       bool
	Problem  string
	// At is the record that failed.
	At string
}

func (c *Console) auditPage(w http.ResponseWriter, r *http.Request, se session) error {
	q := r.URL.Query()
	agent := strings.TrimSpace(q.Get("agent"))
	d := map[string]any{"Agent": agent, "JWKSURL": c.cfg.JWKSURL}
	if agent == "" {
		return c.page(w, "audit", "audit", "Audit", se, d)
	}
	ctx, cancel := c.rpc(r, se)
	defer cancel()
	head, err := c.audit.GetChainHead(ctx, &auditv1.GetChainHeadRequest{AgentId: agent})
	if err != nil {
		return err
	}
	d["Head"], d["Length"] = head.GetAuditId(), head.GetLength()
	from := q.Get("from")
	if from == "" {
		from = head.GetAuditId()
	} else if !attribution.IsAuditID(from) {
		return badRequest("from is an Audit-ID: 64 lowercase hex digits")
	}
	var recs []chainRecord
	next := from
	for len(recs) < c.cfg.PageSize && next != "" && next != genesisLink {
		rec, err := c.record(ctx, next)
		if err != nil {
			return err
		}
		if rec.R.GetChainAgentId() != agent {
			return badRequest("that record is not in this agent's chain")
		}
		recs = append(recs, rec)
		next = rec.Previous
	}
	if next == genesisLink {
		next = ""
	}
	d["Records"], d["Next"] = recs, next
	if v := q.Get("verify"); v != "" {
		depth, err := strconv.Atoi(v)
		if err != nil || depth < 1 || depth > maxDepth {
			return badRequest(fmt.Sprintf("verify to a depth of 1 to %d records", maxDepth))
		}
		res, err := c.verify(ctx, head.GetAuditId(), agent, depth)
		if err != nil {
			return err
		}
		d["Verification"] = res
	}
	return c.page(w, "audit", "audit", "Audit", se, d)
}

func (c *Console) record(ctx context.Context, id string) (chainRecord, error) {
	res, err := c.audit.GetRecord(ctx, &auditv1.GetRecordRequest{AuditId: id})
	if err != nil {
		return chainRecord{}, err
	}
	rec := chainRecord{R: res.GetRecord()}
	//lint:ignore SA1019 the first release's auditsvc sends the payload only as JSON bytes
	if rec.Payload, err = auditclient.Payload(rec.R.GetPayload(), rec.R.GetPayloadJson()); err != nil {
		return chainRecord{}, fmt.Errorf("record %s: %w", id, err)
	}
	rec.Previous, _ = rec.Payload["previous_audit_id"].(string)
	return rec, nil
}

// verify walks depth records back from the head with the checks a
// relying party makes (attribution.WalkBack: each record hashes to the
// Audit-ID that named it, its signature verifies with a published key, it
// is in this agent's chain and links to the next).
func (c *Console) verify(ctx context.Context, head, agent string, depth int) (verification, error) {
	keys, err := c.audit.GetSigningKeys(ctx, &auditv1.GetSigningKeysRequest{})
	if err != nil {
		return verification{}, err
	}
	//lint:ignore SA1019 the first release's auditsvc sends the JWKS only as bytes
	jwks, err := jsondoc.PreferStruct(keys.GetJwks(), keys.GetJwksJson())
	if err != nil {
		return verification{}, err
	}
	pub, err := attribution.ParseJWKS(jwks)
	if err != nil {
		return verification{}, err
	}
	fetch := func(ctx context.Context, id string) (string, error) {
		rec, err := c.audit.GetRecord(ctx, &auditv1.GetRecordRequest{AuditId: id})
		if err != nil {
			return "", err
		}
		if rec.GetRecord().GetChainAgentId() != agent {
			return "", errors.New("the record belongs to another chain")
		}
		return rec.GetRecord().GetJws(), nil
	}
	res := attribution.WalkBack(ctx, head, fetch, attribution.ChainOptions{VerifyOptions: attribution.VerifyOptions{Keys: pub}, AgentID: agent}, uint64(depth))
	v := verification{Depth: depth, Verified: int(res.Checked), OK: res.Valid}
	if b := res.Break; b != nil && !(b.Problem == attribution.ProblemTooLong && int(res.Checked) == depth) {
		v.Problem, v.At = b.Problem+": "+b.Err.Error(), b.Expected
	} else {
		// Reaching the chosen depth is success, not a chain too long.
		v.OK = true
	}
	return v, nil
}
