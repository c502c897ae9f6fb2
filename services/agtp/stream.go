package agtp

import (
	"bufio"
	"io"
)

// StreamContinue is the value of [HeaderStream] on every response of a
// series except the last.
const StreamContinue = "continue"

// More reports whether r announces further responses to the same request.
func (r *Response) More() bool {
	return equalFold(r.Header.Get(HeaderStream), StreamContinue)
}

// Stream reads the series of responses to one request.
//
// AGTP has no chunked coding: a streamed method answers with a series of
// complete responses, each framed by its own Content-Length, on the same
// connection (TCP) or stream (QUIC) as the request (core §5.4.1). The
// drafts do not say how a client knows more are coming, so this package
// fixes the convention: every response of the series except the last
// carries
//
//	X-AGTP-Stream: continue
//
// and the last one does not (docs/decisions.md#D-streamed-responses). The
// X- prefix follows docs/decisions.md#D-implementation-fields: the field is
// an implementation field, not protocol vocabulary. Because
// responses on a connection are in request order, the series belongs to
// the request it follows, and the next request's response comes after
// the last message. A response may also carry Continuation-Token, which
// keeps its draft meaning (a token to fetch more later) and does not
// affect framing.
//
// A server writes a series by setting the field on all but the last
// response (and flushing after each, so the client sees progress):
//
//	part.Header.Set(agtp.HeaderStream, agtp.StreamContinue)
//
// A client reads one with [Stream.Next].
type Stream struct {
	br   *bufio.Reader
	lim  Limits
	done bool
}

// NewStream returns a Stream reading the responses to one request from
// br.
func NewStream(br *bufio.Reader, lim Limits) *Stream {
	return &Stream{br: br, lim: lim}
}

// Next returns the next response of the series. After it has returned
// the last one (the one whose More is false) it returns io.EOF. A
// connection that ends before the last response gives
// io.ErrUnexpectedEOF, so io.EOF always means the series is complete.
func (s *Stream) Next() (*Response, error) {
	if s.done {
		return nil, io.EOF
	}
	resp, err := ReadResponse(s.br, s.lim)
	if err != nil {
		s.done = true
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	s.done = !resp.More()
	return resp, nil
}
