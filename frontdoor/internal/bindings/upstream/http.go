package upstream

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"go.opentelemetry.io/otel/propagation"

	"github.com/agtpsuite/agtp/catalogsvc/endpoint"
	"github.com/agtpsuite/agtp/frontdoor/handler"
)

// bodyless methods send the input as query parameters.
var bodyless = map[string]bool{http.MethodGet: true, http.MethodHead: true, http.MethodDelete: true, http.MethodOptions: true}

func (e *Executor) callHTTP(ctx context.Context, b *binding, in map[string]any, hdr callHeader) (attempt, error) {
	target, err := fillURL(b.rawURL, in)
	var refused *handler.Error
	if errors.As(err, &refused) {
		return attempt{}, refused
	}
	if err != nil {
		return attempt{}, fmt.Errorf("%w: %s: handler.url: %v", ErrBinding, b.endpoint, err)
	}
	var body []byte
	if bodyless[b.method] {
		q := target.Query()
		addQuery(q, in)
		target.RawQuery = q.Encode()
	} else if body, err = json.Marshal(in); err != nil {
		return attempt{}, fmt.Errorf("external_service input: %w", err)
	}
	endpointURL := target.String()
	return e.run(ctx, b, "upstream "+b.method, func(ctx context.Context) attempt {
		req, err := http.NewRequestWithContext(ctx, b.method, endpointURL, bytes.NewReader(body))
		if err != nil {
			return attempt{fail: failConnection, permanent: true, err: err}
		}
		if body == nil {
			req.Body, req.ContentLength = http.NoBody, 0
		}
		for k, vs := range b.header {
			req.Header[k] = vs
		}
		if body != nil && req.Header.Get("Content-Type") == "" {
			req.Header.Set("Content-Type", "application/json")
		}
		if req.Header.Get("Accept") == "" {
			req.Header.Set("Accept", "application/json")
		}
		req.Header.Set("User-Agent", e.opts.UserAgent)
		if hdr.idemKey != "" {
			// Every attempt carries the same key, so an upstream that saw
			// an earlier one (a timed-out call, a retry of the request)
			// can answer it without acting twice.
			req.Header.Set(b.idemHeader, hdr.idemKey)
		}
		if hdr.core != "" {
			req.Header.Set(CoreParametersHeader, hdr.core)
		}
		e.opts.Propagator.Inject(ctx, propagation.HeaderCarrier(req.Header))
		return e.do(ctx, req)
	})
}

// do sends one request and reads the answer, bounded in size.
func (e *Executor) do(ctx context.Context, req *http.Request) attempt {
	resp, err := e.client.Do(req)
	if err != nil {
		return connFailure(ctx, err)
	}
	defer resp.Body.Close()
	a := attempt{status: resp.StatusCode, header: resp.Header}
	limit := e.opts.MaxResponseBytes
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		// An error answer's body is not used; a little is drained so the
		// connection can be reused.
		_, _ = io.CopyN(io.Discard, resp.Body, 64<<10)
		return a
	}
	if resp.ContentLength > limit {
		a.fail = failTooLarge
		return a
	}
	a.body, err = io.ReadAll(io.LimitReader(resp.Body, limit+1))
	if err != nil {
		// The upstream answered 2xx, so it acted: a body that breaks off
		// or stalls is an answer that cannot be read, not an upstream
		// that could not be reached. As a transient failure it would be
		// retried, or release the Idempotency-Key for the caller's retry,
		// and call the upstream again (docs/bindings.md "What is
		// replayed").
		a.fail, a.err = failMalformed, err
		return a
	}
	if int64(len(a.body)) > limit {
		a.fail, a.body = failTooLarge, nil
	}
	return a
}

// fillURL substitutes the URL's {param}s, which compile keeps to the
// path, from the input and removes the members it used. A value is
// percent-encoded to stay within its path segment (url.PathEscape, which
// encodes '/', '?', '#', ';', ',', '%' and '\\' among others). A value the
// upstream could resolve outside the binding's path is refused as the
// caller's error (invalid_input, 422): one that leaves its segment empty,
// "." or "..", or that holds a "." or ".." part between slashes or
// backslashes (a server that decodes %2F or %5C before it resolves dot
// segments would climb with it).
func fillURL(raw string, in map[string]any) (*url.URL, error) {
	start, end := endpoint.URLPathSpan(raw)
	segs := strings.Split(raw[start:end], "/")
	var missing, refused error
	for i, seg := range segs {
		if !paramRe.MatchString(seg) {
			continue
		}
		dotted := false
		segs[i] = paramRe.ReplaceAllStringFunc(seg, func(m string) string {
			name := m[1 : len(m)-1]
			v, ok := scalar(in[name])
			if !ok {
				missing = errors.Join(missing, fmt.Errorf("{%s} has no scalar input value", name))
				return ""
			}
			delete(in, name)
			if dotSegment(v) {
				dotted = true
				refused = errors.Join(refused, fmt.Errorf("%s may not hold a \".\" or \"..\" part between slashes", name))
			}
			return url.PathEscape(v)
		})
		if !dotted && missing == nil && (segs[i] == "" || segs[i] == "." || segs[i] == "..") {
			refused = errors.Join(refused, fmt.Errorf("the input makes the URL path segment %s empty, \".\" or \"..\"", seg))
		}
	}
	switch {
	case missing != nil:
		return nil, missing
	case refused != nil:
		return nil, &handler.Error{Name: errInvalidInput, Status: http.StatusUnprocessableEntity,
			Message: "a value cannot fill the upstream URL's path: " + strings.ReplaceAll(refused.Error(), "\n", "; ")}
	}
	return url.Parse(raw[:start] + strings.Join(segs, "/") + raw[end:])
}

// dotSegment reports whether v, split at slashes and backslashes, has a
// "." or ".." part.
func dotSegment(v string) bool {
	for _, part := range strings.FieldsFunc(v, func(r rune) bool { return r == '/' || r == '\\' }) {
		if part == "." || part == ".." {
			return true
		}
	}
	return false
}

// addQuery renders input members as query parameters: scalars as text,
// arrays of scalars repeated, anything else as JSON text.
func addQuery(q url.Values, in map[string]any) {
	for k, v := range in {
		if v == nil {
			continue
		}
		if s, ok := scalar(v); ok {
			q.Add(k, s)
			continue
		}
		if arr, ok := v.([]any); ok {
			all := true
			for _, x := range arr {
				if _, ok := scalar(x); !ok {
					all = false
					break
				}
			}
			if all {
				for _, x := range arr {
					s, _ := scalar(x)
					q.Add(k, s)
				}
				continue
			}
		}
		b, _ := json.Marshal(v)
		q.Add(k, string(b))
	}
}

func scalar(v any) (string, bool) {
	switch x := v.(type) {
	case string:
		return x, true
	case json.Number:
		return x.String(), true
	case float64:
		return strconv.FormatFloat(x, 'f', -1, 64), true
	case bool:
		return strconv.FormatBool(x), true
	}
	return "", false
}

// decodeObject decodes the validated input; an absent input is empty.
func decodeObject(raw []byte) (map[string]any, error) {
	if len(bytes.TrimSpace(raw)) == 0 {
		return map[string]any{}, nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var m map[string]any
	if err := dec.Decode(&m); err != nil {
		return nil, err
	}
	if m == nil {
		m = map[string]any{}
	}
	return m, nil
}

// decodeOutput decodes an upstream's 2xx body: one JSON value, numbers
// kept exact; an empty body is an empty object.
func decodeOutput(body []byte) (any, error) {
	if len(bytes.TrimSpace(body)) == 0 {
		return map[string]any{}, nil
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("more than one JSON value")
	}
	return v, nil
}

// rename applies a transform (AGTP name -> upstream name) to the top-level
// members; inverted, it maps upstream names back (AGTP-API §12.3: the
// output_transform is written AGTP -> upstream and inverted on the way
// back). Members not in the map pass through.
func rename(m map[string]any, tr map[string]string, inverted bool) map[string]any {
	if len(tr) == 0 {
		return m
	}
	out := make(map[string]any, len(m))
	from := map[string]string{}
	for agtpName, upName := range tr {
		if inverted {
			from[upName] = agtpName
		} else {
			from[agtpName] = upName
		}
	}
	// Renamed members win over a pass-through member of the same name.
	for k, v := range m {
		if _, ok := from[k]; !ok {
			out[k] = v
		}
	}
	for k, v := range m {
		if to, ok := from[k]; ok {
			out[to] = v
		}
	}
	return out
}
