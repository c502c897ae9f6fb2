package agtp

import (
	"bufio"
	"fmt"
	"strconv"
	"strings"
)

// Write writes r in wire form: the status line, the header fields in
// order, Content-Length, the empty line and the body, with CRLF line
// endings. It does not flush w, so that a server can batch pipelined
// responses; call w.Flush when the peer should see them.
//
// Write enforces what the drafts require of every response, so no caller
// can put a non-conformant message on the wire:
//   - Content-Length is always written, computed from Body (0 when there
//     is none); a Content-Length in Header is ignored.
//   - Transfer-Encoding and the retired fields (core §5.5.6) are dropped
//     silently rather than failing the response, because a handler that
//     copies fields through should not turn into a 500.
//   - Content-Type is dropped when there is no body (core §5.7) and is
//     required when there is one (ErrMissingContentType).
//   - A 204 with a body is refused (ErrBodyNotAllowed).
//   - Field names must be tokens and values must hold no control
//     characters other than HTAB (ErrInvalidHeader), which rules out
//     header injection.
//
// An empty StatusText is written as StatusText(Status).
func (r *Response) Write(w *bufio.Writer) error {
	if err := r.Check(); err != nil {
		return err
	}
	text := r.StatusText
	if text == "" {
		text = StatusText(r.Status)
	}
	w.WriteString(Version)
	w.WriteByte(' ')
	w.WriteByte(byte('0' + r.Status/100))
	w.WriteByte(byte('0' + r.Status/10%10))
	w.WriteByte(byte('0' + r.Status%10))
	w.WriteByte(' ')
	w.WriteString(text)
	w.WriteString("\r\n")
	return writeFieldsAndBody(w, r.Header, r.Body)
}

// Check reports whether [Response.Write] would refuse r, with the error
// Write would return, without writing anything: a server that must stamp
// and record a response before it leaves can replace one Write would
// refuse while it still can.
func (r *Response) Check() error {
	if r.Status < 100 || r.Status > 999 {
		return ErrInvalidStatus
	}
	text := r.StatusText
	if text == "" {
		text = StatusText(r.Status)
	}
	for i := 0; i < len(text); i++ {
		if charClass[text[i]]&cText == 0 {
			return ErrInvalidStatus
		}
	}
	hasBody := len(r.Body) > 0
	if hasBody && r.Status == StatusNoContent {
		return ErrBodyNotAllowed
	}
	return checkFields(r.Header, hasBody)
}

// Write writes r in wire form, with the same field rules as
// [Response.Write]. The request-target is Path ("/" when empty) plus "?"
// and RawQuery when RawQuery is set; Target is ignored. The method must
// be a token (ErrInvalidMethod) but need not pass [ValidMethodToken], so
// that clients and conformance tests can probe a server's 459 handling.
// Write does not flush w.
func (r *Request) Write(w *bufio.Writer) error {
	if !validToken(r.Method) {
		return ErrInvalidMethod
	}
	path := r.Path
	if path == "" {
		path = "/"
	}
	if strings.IndexByte(path, '?') >= 0 {
		return fmt.Errorf("%w: Path contains '?'; put the query in RawQuery", ErrInvalidTarget)
	}
	if p := targetProblem(path); p != "" {
		return fmt.Errorf("%w: %s", ErrInvalidTarget, p)
	}
	if p := charsProblem(r.RawQuery); p != "" {
		return fmt.Errorf("%w: %s", ErrInvalidTarget, p)
	}
	if err := checkFields(r.Header, len(r.Body) > 0); err != nil {
		return err
	}
	w.WriteString(Version)
	w.WriteByte(' ')
	w.WriteString(r.Method)
	w.WriteByte(' ')
	w.WriteString(path)
	if r.RawQuery != "" {
		w.WriteByte('?')
		w.WriteString(r.RawQuery)
	}
	w.WriteString("\r\n")
	return writeFieldsAndBody(w, r.Header, r.Body)
}

// dropped reports whether Write leaves a field out; see Response.Write.
func dropped(name string, hasBody bool) bool {
	switch CanonicalName(name) {
	case HeaderContentLength, HeaderTransferEncoding,
		HeaderRetiredVersion, HeaderRetiredMethod, HeaderRetiredStatus,
		HeaderRetiredPrincipalID, HeaderRetiredServerAgentID:
		return true
	case HeaderContentType:
		return !hasBody
	}
	return false
}

// checkFields validates before anything is written, so a refused message
// leaves nothing half-written in w.
func checkFields(h Header, hasBody bool) error {
	hasType := false
	for _, f := range h {
		if dropped(f.Name, hasBody) {
			continue
		}
		if !validToken(f.Name) {
			return fmt.Errorf("%w: name %q", ErrInvalidHeader, f.Name)
		}
		if !validValue(f.Value) {
			return fmt.Errorf("%w: value of %s", ErrInvalidHeader, f.Name)
		}
		if equalFold(f.Name, HeaderContentType) {
			hasType = true
		}
	}
	if hasBody && !hasType {
		return ErrMissingContentType
	}
	return nil
}

func writeFieldsAndBody(w *bufio.Writer, h Header, body []byte) error {
	hasBody := len(body) > 0
	for _, f := range h {
		if dropped(f.Name, hasBody) {
			continue
		}
		w.WriteString(f.Name)
		w.WriteString(": ")
		w.WriteString(f.Value)
		w.WriteString("\r\n")
	}
	w.WriteString(HeaderContentLength + ": ")
	// AvailableBuffer keeps the number formatting allocation-free.
	w.Write(strconv.AppendInt(w.AvailableBuffer(), int64(len(body)), 10))
	w.WriteString("\r\n\r\n")
	_, err := w.Write(body)
	return err
}
