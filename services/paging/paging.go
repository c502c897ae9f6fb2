// Package paging implements the AIP-158 paging contract every List RPC of
// the suite follows (docs/operations.md#paging): page_size with a default
// and a maximum per RPC, an opaque page_token that carries the position
// after the last item returned, and next_page_token, empty on the last
// page.
//
// A token is base64url of a small JSON document: the RPC, a hash of the
// request's filter fields and the position. It is not encrypted (a
// position reveals nothing the caller could not list), but it is
// validated: a garbled token, or one issued for another RPC or another
// filter, is InvalidArgument, so a caller cannot splice pages of two
// different listings together.
package paging

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/agtpsuite/agtp/services/grpcerr"
)

// Reasons of the InvalidArgument errors a bad paging request gets.
const (
	ReasonPageSizeInvalid  = "page-size-invalid"
	ReasonPageTokenInvalid = "page-token-invalid"
	ReasonPageTokenOther   = "page-token-mismatch"
)

const (
	// maxTokenLen bounds the token a peer sends before it is decoded.
	maxTokenLen = 1024
	// maxPositionLen bounds a position; every store key the suite pages
	// over is far shorter.
	maxPositionLen = 512
)

// Spec is one List RPC's paging: its name (bound into every token) and
// its page sizes.
type Spec struct {
	// RPC names the method, e.g. "agtp.task.v1.TaskService/ListInbox".
	RPC string
	// Default is the page size of a request without page_size.
	Default int
	// Max is the largest page; a larger page_size is coerced to it.
	Max int
}

// Request is a validated page request.
type Request struct {
	// Size is the number of items to return at most (1..Spec.Max).
	Size int
	// After is the position of the last item of the previous page, empty
	// for the first page.
	After  string
	rpc    string
	filter string
}

// token is the decoded form of a page_token.
type token struct {
	RPC    string `json:"r"`
	Filter string `json:"f"`
	After  string `json:"a"`
}

// Parse validates page_size and page_token against the request's filter
// fields (every field that changes which items are listed, in a fixed
// order).
func (s Spec) Parse(pageSize int32, pageToken string, filter ...string) (Request, error) {
	r := Request{Size: int(pageSize), rpc: s.RPC, filter: filterHash(s.RPC, filter)}
	switch {
	case pageSize < 0:
		return Request{}, grpcerr.InvalidArgument(ReasonPageSizeInvalid, "page_size must not be negative")
	case pageSize == 0:
		r.Size = s.Default
	case int(pageSize) > s.Max:
		r.Size = s.Max
	}
	if pageToken == "" {
		return r, nil
	}
	t, err := decode(pageToken)
	if err != nil {
		return Request{}, grpcerr.InvalidArgument(ReasonPageTokenInvalid, "page_token is not a next_page_token this service issued: "+err.Error())
	}
	if t.RPC != s.RPC || t.Filter != r.filter {
		return Request{}, grpcerr.InvalidArgument(ReasonPageTokenOther,
			"page_token was issued for a different request; repeat the same filter fields, or start again without page_token")
	}
	r.After = t.After
	return r, nil
}

// Next is the next_page_token of a page whose last item is at position
// last: more items may follow it.
func (r Request) Next(last string) string {
	b, err := json.Marshal(token{RPC: r.rpc, Filter: r.filter, After: last})
	if err != nil {
		panic(fmt.Sprintf("paging: marshal token: %v", err)) // strings always marshal
	}
	return base64.RawURLEncoding.EncodeToString(b)
}

func decode(s string) (token, error) {
	if len(s) > maxTokenLen {
		return token{}, fmt.Errorf("longer than %d characters", maxTokenLen)
	}
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return token{}, errors.New("not base64url")
	}
	var t token
	if err := json.Unmarshal(b, &t); err != nil {
		return token{}, errors.New("not a token")
	}
	if t.RPC == "" || t.After == "" || len(t.After) > maxPositionLen {
		return token{}, errors.New("not a token")
	}
	return t, nil
}

// filterHash binds a token to the RPC and the filter fields; each field is
// length-prefixed so that ("ab", "") and ("a", "b") differ.
func filterHash(rpc string, filter []string) string {
	h := sha256.New()
	var n [8]byte
	for _, f := range append([]string{rpc}, filter...) {
		binary.BigEndian.PutUint64(n[:], uint64(len(f)))
		h.Write(n[:])
		h.Write([]byte(f))
	}
	return base64.RawURLEncoding.EncodeToString(h.Sum(nil)[:12])
}

// MaxPages bounds All: a listing longer than this many pages is an error
// rather than an unbounded loop.
const MaxPages = 10000

// All collects every item of a paged listing for an internal caller that
// needs the whole list (a DISCOVER body, an admin view): it asks for
// pages with the previous next_page_token until one comes back empty.
func All[T any](ctx context.Context, page func(ctx context.Context, pageToken string) (items []T, next string, err error)) ([]T, error) {
	var out []T
	tok := ""
	for range MaxPages {
		items, next, err := page(ctx, tok)
		if err != nil {
			return nil, err
		}
		out = append(out, items...)
		if next == "" {
			return out, nil
		}
		if next == tok {
			return nil, fmt.Errorf("paging: the listing returned the same page_token twice")
		}
		tok = next
	}
	return nil, fmt.Errorf("paging: the listing has more than %d pages", MaxPages)
}
