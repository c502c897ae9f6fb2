package agtp

import (
	"net/url"
	"strings"
)

// Version is the protocol version on every request and status line.
const Version = "AGTP/1.0"

// SpecVersion names the revision of the core specification this package
// implements, which /.well-known/agtp publishes and `agtp --version`
// prints; the wire version (Version) does not change between drafts.
const SpecVersion = "draft-hood-independent-agtp-08"

// DocumentVersion is the agtp_version the suite publishes in
// /.well-known/agtp and identity documents by default
// (docs/decisions.md#D-agtp-version): the specification's version as
// SemVer, never compared with the wire version.
const DocumentVersion = "0.8.0"

// inlineFields is how many fields a parsed message holds without a
// second allocation; typical AGTP requests carry 6 to 12.
const inlineFields = 12

// Request is one AGTP request.
//
// ReadRequest fills every field. To build a request, use [NewRequest] or
// set Method, Path and (optionally) RawQuery directly.
type Request struct {
	// Method is the method token exactly as received; it is never
	// upper-cased.
	Method string
	// Target is the request-target as received, or "/" when the request
	// line had none. Write ignores it: Path and RawQuery are what is sent.
	Target string
	// Path is the target up to the first '?', still percent-encoded.
	// It never contains the query. Use SplitPath to walk its segments.
	Path string
	// RawQuery is everything after the first '?', still percent-encoded.
	RawQuery string
	Header   Header
	// Body holds exactly Content-Length bytes; nil when there is none.
	Body []byte

	fields [inlineFields]Field // backing array for Header
}

// Response is one AGTP response.
type Response struct {
	Status int
	// StatusText is the free text after the code. It carries no meaning
	// (core §5.5.2); Write uses StatusText(Status) when it is empty.
	StatusText string
	Header     Header
	// Body holds exactly Content-Length bytes; nil when there is none.
	Body []byte

	fields [inlineFields]Field
}

// NewRequest returns a request for method and target, where target is a
// path with an optional "?query". It returns a *ProtocolError (400
// invalid-request-line) if target would not survive ReadRequest; the
// method is not checked here, so that clients can probe 459 handling.
func NewRequest(method, target string) (*Request, error) {
	if err := checkTarget(target); err != nil {
		return nil, err
	}
	r := &Request{Method: method, Target: target}
	r.Path, r.RawQuery, _ = strings.Cut(target, "?")
	r.Header = r.fields[:0]
	return r, nil
}

// NewResponse returns a response with status and, when body is
// non-empty, the given content type.
func NewResponse(status int, contentType string, body []byte) *Response {
	r := &Response{Status: status, Body: body}
	r.Header = r.fields[:0]
	if len(body) > 0 {
		r.Header.Set(HeaderContentType, contentType)
	}
	return r
}

// Query parses RawQuery. Parameters may come from the query as well as
// the body (core §5.7; docs/decisions.md#D-input-form).
func (r *Request) Query() (url.Values, error) {
	return url.ParseQuery(r.RawQuery)
}

// Clone returns a deep copy of r.
func (r *Request) Clone() *Request {
	c := &Request{Method: r.Method, Target: r.Target, Path: r.Path, RawQuery: r.RawQuery}
	c.Header = append(c.fields[:0], r.Header...)
	if r.Body != nil {
		c.Body = append([]byte(nil), r.Body...)
	}
	return c
}

// Clone returns a deep copy of r.
func (r *Response) Clone() *Response {
	c := &Response{Status: r.Status, StatusText: r.StatusText}
	c.Header = append(c.fields[:0], r.Header...)
	if r.Body != nil {
		c.Body = append([]byte(nil), r.Body...)
	}
	return c
}

// SplitPath returns the segments of a raw path, without percent-decoding
// them: "/a/b%2Fc/" gives ["a", "b%2Fc", ""]. Decoding is left to the
// caller because a decoded "%2F" would be indistinguishable from a
// separator. "/" and "" give no segments.
func SplitPath(path string) []string {
	path = strings.TrimPrefix(path, "/")
	if path == "" {
		return nil
	}
	return strings.Split(path, "/")
}
