package agp

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"net/url"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/agtpsuite/agtp/frontdoor/internal/pipeline"
	agpv1 "github.com/agtpsuite/agtp/proto/agtp/agp/v1"
	"github.com/agtpsuite/agtp/services/agtp"
	"github.com/agtpsuite/agtp/services/enumname"
	"github.com/agtpsuite/agtp/services/jcs"
	"github.com/agtpsuite/agtp/services/jsondoc"
)

// transaction is what an operation leaves behind (AGP §6.5).
type transaction struct {
	id, op, business string
	input            any
	created          time.Time
}

func (c *call) newTransaction(op, business string, input any) *transaction {
	return &transaction{id: uuid.NewString(), op: op, business: business, input: input, created: time.Now()}
}

// Transaction statuses (AGP §5.1).
const (
	txPending   = "pending"
	txSucceeded = "succeeded"
	txFailed    = "failed"
)

// txStatus is the transaction status of an AGTP answer: 202 Accepted is
// work that outlives the request (core §6: accepted, runs
// asynchronously), so the transaction is pending.
func txStatus(status int) string {
	switch {
	case status == agtp.StatusAccepted:
		return txPending
	case succeeded(status):
		return txSucceeded
	}
	return txFailed
}

// finish stores the transaction record and then answers: a client that
// polls GET /agp/status the moment it has its transactionId finds the
// record.
func (c *call) finish(tx *transaction, out *pipeline.BoundOutcome) {
	c.store(tx, out)
	c.write(out)
}

// store writes the transaction record of a finished operation. A failed
// one keeps its input only as failedInput: the record of a refusal costs
// the store a few KiB whatever the caller sent.
func (c *call) store(tx *transaction, out *pipeline.BoundOutcome) {
	if out.Replayed || out.AgentID == "" {
		return
	}
	resp := out.Response
	st := txStatus(resp.Status)
	var in []byte
	if st == txFailed {
		in = failedInput(tx.input)
	} else {
		in, _ = json.Marshal(tx.input)
	}
	input, _ := jsondoc.Struct(in)
	rec := &agpv1.Transaction{
		Id: tx.id, AgentId: out.AgentID, AgpOperation: enumname.Value[agpv1.AgpOperation](tx.op), BusinessId: tx.business,
		CreatedAt: timestamppb.New(tx.created), UpdatedAt: timestamppb.Now(),
		Input: input, AuditId: out.AuditID, ApiKeyId: c.key.GetId(), State: enumname.Value[agpv1.TransactionStatus](st),
	}
	if st != txFailed {
		var env operationEnvelope
		if json.Unmarshal(resp.Body, &env) == nil {
			rec.Result, _ = jsondoc.Value(env.Data)
		}
	} else {
		var eb errorBody
		if json.Unmarshal(resp.Body, &eb) == nil {
			rec.Error = eb.Error
			if eb.Message != "" {
				rec.Error = eb.Message
			}
		}
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(c.r.Context()), 3*time.Second)
	defer cancel()
	if _, err := c.h.o.Keys.PutTransaction(ctx, &agpv1.PutTransactionRequest{Transaction: rec}); err != nil {
		c.h.o.Log.ErrorContext(ctx, "agp transaction record not stored", "transaction_id", tx.id, "audit_id", out.AuditID, "error", err)
	}
}

// maxFailedInputPrefix is how much of a failed transaction's input its
// record keeps: at most this many bytes of the input's canonical form
// (docs/agp.md, "Transactions").
const maxFailedInputPrefix = 4 << 10

// failedInput is what the record of a failed transaction keeps of its
// input (a JSON object): {sha256, size, prefix, truncated}, the SHA-256
// (hex) and the length in bytes of the input's RFC 8785 form, which for
// query and execute is the request hash a confirmation token is bound to,
// and that form's first maxFailedInputPrefix bytes at most, cut at a
// character boundary; truncated says whether the prefix is less than the
// whole. What a refused or failed call sent is then identifiable and
// readable in part, and its record stays a few KiB however large the
// input was.
func failedInput(input any) []byte {
	b, err := jcs.Marshal(input)
	if err != nil {
		// Not canonicalizable (operations refuse such requests before
		// they have a transaction): its plain JSON stands in.
		b, _ = json.Marshal(input)
	}
	sum := sha256.Sum256(b)
	n := len(b)
	if n > maxFailedInputPrefix {
		n = maxFailedInputPrefix
		for n > 0 && !utf8.RuneStart(b[n]) {
			n--
		}
	}
	out, _ := json.Marshal(map[string]any{"sha256": hex.EncodeToString(sum[:]), "size": len(b), "prefix": string(b[:n]), "truncated": n < len(b)})
	return out
}

// shaper returns the Shape hook of an operation: a handler's result
// becomes AGP's transaction envelope, an AGTP error AGP's error body, and
// what the binding shaped itself passes through.
func (c *call) shaper(tx *transaction) func(context.Context, *pipeline.View, *agtp.Response) *agtp.Response {
	return func(_ context.Context, _ *pipeline.View, resp *agtp.Response) *agtp.Response {
		if resp.Header.Get(agtp.HeaderContentType) == ContentType {
			return resp
		}
		if succeeded(resp.Status) {
			data := resultOf(resp.Body)
			b, err := json.Marshal(operationEnvelope{TransactionID: tx.id, Status: txStatus(resp.Status), Data: data})
			if err != nil {
				return (&apiError{Status: 500, Code: CodeInternal, Message: "the result could not be encoded"}).response(c.rid)
			}
			out := agtp.NewResponse(resp.Status, ContentType, b)
			return out
		}
		e := fromAGTP(resp)
		e.Details["transactionId"] = tx.id
		return e.response(c.rid)
	}
}

func (c *call) failTx(tx *transaction, e *apiError) {
	if e.Details == nil {
		e.Details = map[string]any{}
	}
	e.Details["transactionId"] = tx.id
	c.finish(tx, c.refusal(e))
}

// status serves GET /agp/status/{id} (AGP §6.5) as QUERY /tasks/{id}: the
// transaction record, found only under the caller's own Agent-ID.
func (h *Handler) status(w http.ResponseWriter, r *http.Request) {
	c := h.begin(w, r, agtp.MethodQuery)
	if !c.authenticate("") {
		return
	}
	id := r.PathValue("id")
	notFound := &apiError{Status: http.StatusNotFound, Code: CodeTransactionUnknown, Error: "Transaction not found", Message: "No transaction exists for the provided ID."}
	if _, err := uuid.Parse(id); err != nil || len(id) != 36 {
		c.refuse(notFound)
		return
	}
	out := h.o.Pipeline.ServeBound(r.Context(), &pipeline.Bound{
		Request: c.request(agtp.MethodQuery, "/tasks/"+url.PathEscape(id), nil),
		Conn:    c.conn(),
		Intercept: func(ctx context.Context, v *pipeline.View) *agtp.Response {
			res, err := h.o.Keys.GetTransaction(ctx, &agpv1.GetTransactionRequest{AgentId: v.AgentID, TransactionId: id})
			if status.Code(err) == codes.NotFound {
				return notFound.response(c.rid)
			}
			if err != nil {
				h.o.Log.WarnContext(ctx, "agp transaction lookup failed", "error", err)
				return (&apiError{Status: http.StatusServiceUnavailable, Code: CodeUnavailable, Message: "Transactions cannot be read right now; retry shortly."}).response(c.rid)
			}
			b, _ := json.Marshal(transactionView(res.GetTransaction()))
			return agtp.NewResponse(http.StatusOK, ContentType, b)
		},
		Shape: c.shapeRefusal,
	})
	c.write(out)
}

// transactionView is AGP §6.5's stored-record shape.
func transactionView(t *agpv1.Transaction) map[string]any {
	raw := func(b []byte) any {
		if len(b) == 0 {
			return nil
		}
		return json.RawMessage(b)
	}
	var errv any
	if t.GetError() != "" {
		errv = t.GetError()
	}
	// The first release's policysvc sends the operation, the status and
	// the documents in the deprecated fields only.
	//lint:ignore SA1019 read when the enum is unset
	op := enumname.Prefer(t.GetAgpOperation(), t.GetOperation())
	//lint:ignore SA1019 read when the enum is unset
	status := enumname.Prefer(t.GetState(), t.GetStatus())
	//lint:ignore SA1019 read when the Struct is unset
	input, _ := jsondoc.PreferStruct(t.GetInput(), t.GetInputJson())
	//lint:ignore SA1019 read when the Value is unset
	result, _ := jsondoc.PreferValue(t.GetResult(), t.GetResultJson())
	return map[string]any{
		"id": t.GetId(), "operation": op, "businessId": t.GetBusinessId(), "status": status,
		"createdAt": t.GetCreatedAt().AsTime().UTC().Format(time.RFC3339Nano), "updatedAt": t.GetUpdatedAt().AsTime().UTC().Format(time.RFC3339Nano),
		"input": raw(input), "result": raw(result), "error": errv, "auditId": t.GetAuditId(),
	}
}
