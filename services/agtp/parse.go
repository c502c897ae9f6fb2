package agtp

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"strconv"
	"strings"
	"sync"
)

// ReadRequest reads one request from br.
//
// It returns io.EOF if br is at end of input before the first byte of a
// request, which is how a client ends a persistent connection, and
// io.ErrUnexpectedEOF if input ends inside one. Read errors from the
// underlying reader (deadlines, resets) are returned unchanged.
//
// A request that breaks a wire rule gives a *ProtocolError carrying the
// status and reason to answer with. If its CloseConnection is false the
// whole request was consumed and the returned *Request is complete, so
// the server can answer (echoing Task-ID) and read the next request; this
// is the case for 459 method-invalid and 400 retired-header. If
// CloseConnection is true the request is nil, except for errors found
// after the header section parsed (framing, body-too-large): then it
// holds the request line and fields, but no body, for the error response.
//
// ReadRequest never reads or buffers more than lim allows; see [Limits].
// It is ReadRequestHead followed by [Head.ReadBody].
func ReadRequest(br *bufio.Reader, lim Limits) (*Request, error) {
	h, err := ReadRequestHead(br, lim)
	if err != nil {
		return h.Request, err
	}
	return h.ReadBody(br, nil)
}

// Head is a request whose header section has been read and whose body
// has not; see [ReadRequestHead].
type Head struct {
	// Request holds the request line and the fields; Body is nil.
	Request *Request
	// ContentLength is the length of the body that follows the head
	// (0 for none). It is within the body limit.
	ContentLength int64

	retired string // the first retired field, reported after the body
}

// ReadRequestHead reads a request up to the end of its header section
// and checks everything that does not need the body: the request line,
// the fields, the framing and the body limit. It lets a server decide
// whether it can take a request (a worker, memory for its body) before
// any byte of the body is buffered. The caller must then call
// [Head.ReadBody] or [Head.DiscardBody] before reading the next message
// from br.
//
// Its errors are ReadRequest's for the same input. When one of them comes
// after the header section parsed (framing, body-too-large), Head.Request
// holds the request line and fields for the error response; otherwise it
// is nil.
func ReadRequestHead(br *bufio.Reader, lim Limits) (Head, error) {
	lim = lim.withDefaults()
	head, startLen, nfields, err := readHead(br, &lim, ReasonRequestLineTooLong, checkRequestLine)
	if err != nil {
		return Head{}, err
	}
	var rl requestLine
	if perr := parseRequestLine(trimLineEnd(head[:startLen]), &rl); perr != nil {
		return Head{}, perr
	}
	// Every token below is a substring of head: one allocation for all.
	req := &Request{Method: head[rl.methodStart:rl.methodEnd], Target: "/", Path: "/"}
	if !rl.targetOmitted {
		req.Target = head[rl.targetStart:rl.targetEnd]
		req.Path, req.RawQuery, _ = strings.Cut(req.Target, "?")
	}
	var perr *ProtocolError
	if req.Header, perr = parseFieldLines(head[startLen:], fieldStore(&req.fields, nfields)); perr != nil {
		return Head{}, perr
	}
	n, retired, perr := framing(req.Header)
	if perr != nil {
		return Head{Request: req}, perr
	}
	if n == 0 {
		// No body: no limit can refuse it, so BodyLimit (a route lookup
		// in a server) is not asked.
		return Head{Request: req, retired: retired}, nil
	}
	limit := lim.MaxBody
	if lim.BodyLimit != nil {
		limit = max(lim.BodyLimit(req.Method, req.Path), 0)
	}
	if n > limit {
		return Head{Request: req}, badRequest(ReasonBodyTooLarge,
			"Content-Length "+strconv.FormatInt(n, 10)+" exceeds the body limit of "+strconv.FormatInt(limit, 10)+" bytes", true)
	}
	return Head{Request: req, ContentLength: n, retired: retired}, nil
}

// ReadBody reads the body of h from br into h.Request.Body and returns
// the request, with ReadRequest's results for what is checked once the
// body is consumed (400 retired-header, 459 method-invalid: the request is
// complete and br is at the next message). A read error gives a nil
// request, as in ReadRequest.
//
// The body's buffer grows as bytes arrive, never past ContentLength: a
// peer that announces a body and sends nothing costs no buffer, and one
// that sends part of it costs at most twice what it sent, or 4 KiB. Before
// each growth grow, when not nil, is called with the number of bytes the
// buffer grows by (their sum is the buffer's final capacity); an error
// from it ends the read and is returned unchanged, with the rest of the
// body unread.
func (h Head) ReadBody(br *bufio.Reader, grow func(n int) error) (*Request, error) {
	req := h.Request
	var err error
	if req.Body, err = readBody(br, h.ContentLength, grow); err != nil {
		return nil, err
	}

	// Rules checked after the body is consumed, so the connection stays
	// framed. Order follows docs/decisions.md#D-decision-order: wire (400)
	// before method (459).
	if h.retired != "" {
		return req, badRequest(ReasonRetiredHeader, h.retired+" is retired (core §5.5.6)", false)
	}
	if !ValidMethodToken(req.Method) {
		return req, &ProtocolError{
			Status:      StatusMethodViolation,
			Reason:      ReasonMethodInvalid,
			Explanation: "method " + strconv.Quote(req.Method) + " does not match ^[A-Z]{3,32}$",
		}
	}
	return req, nil
}

// DiscardBody reads past the body of h without keeping it, so that br is
// at the next message: for a server that refuses the request without
// needing its body and keeps the connection. It costs no memory beyond
// br's buffer. A read error is returned as ReadBody would.
func (h Head) DiscardBody(br *bufio.Reader) error {
	for n := h.ContentLength; n > 0; {
		step := int(min(n, 1<<30))
		m, err := br.Discard(step)
		n -= int64(m)
		if err != nil {
			return unexpectedEOF(err)
		}
	}
	return nil
}

// ReadResponse reads one response from br, with the same EOF rules,
// limits and framing checks as ReadRequest (BodyLimit is not consulted).
// Retired fields are not rejected here, so that a client or conformance
// test can see what a server sent. Every *ProtocolError it returns has
// CloseConnection set.
func ReadResponse(br *bufio.Reader, lim Limits) (*Response, error) {
	lim = lim.withDefaults()
	head, startLen, nfields, err := readHead(br, &lim, ReasonInvalidStatusLine, checkStatusLine)
	if err != nil {
		return nil, err
	}
	line := trimLineEnd(head[:startLen])
	status, perr := parseStatusLine(line)
	if perr != nil {
		return nil, perr
	}
	resp := &Response{Status: status}
	if len(line) > len("AGTP/1.0 200 ") {
		resp.StatusText = line[len("AGTP/1.0 200 "):]
	}
	if resp.Header, perr = parseFieldLines(head[startLen:], fieldStore(&resp.fields, nfields)); perr != nil {
		return nil, perr
	}
	n, _, perr := framing(resp.Header)
	if perr != nil {
		return nil, perr
	}
	if n > lim.MaxBody {
		return nil, badRequest(ReasonBodyTooLarge,
			"Content-Length "+strconv.FormatInt(n, 10)+" exceeds the body limit of "+strconv.FormatInt(lim.MaxBody, 10)+" bytes", true)
	}
	if resp.Body, err = readBody(br, n, nil); err != nil {
		return nil, err
	}
	return resp, nil
}

func checkRequestLine(line []byte) *ProtocolError {
	var rl requestLine
	return parseRequestLine(line, &rl)
}

func checkStatusLine(line []byte) *ProtocolError {
	_, perr := parseStatusLine(line)
	return perr
}

// trimLineEnd removes a trailing LF or CRLF.
func trimLineEnd(s string) string {
	s = strings.TrimSuffix(s, "\n")
	return strings.TrimSuffix(s, "\r")
}

// readHead reads a message head: the start line, the field lines and the
// empty line that ends them, all with their line endings as received. It
// returns the head as one string, the length of the start line (line
// ending included) and the number of field lines. It enforces every
// limit except the body's; checkStart lets a start line that is not
// AGTP fail before any field line is read.
//
// The head is copied once, into the returned string. When it is already
// in br's buffer, as when a request arrives in one read, it is taken from
// there directly; otherwise it is assembled line by line in a pooled
// buffer, each line bounded by the limits as it arrives.
func readHead(br *bufio.Reader, lim *Limits, tooLong string, checkStart func([]byte) *ProtocolError) (string, int, int, error) {
	if _, err := br.Peek(1); err != nil {
		return "", 0, 0, err // io.EOF here is the clean end of a connection
	}
	if head, startLen, n, ok := bufferedHead(br, lim); ok {
		return head, startLen, n, nil
	}

	bp := headBufPool.Get().(*[]byte)
	defer putHeadBuf(bp)
	buf, content, err := appendLine(br, (*bp)[:0], lim.MaxRequestLine+2) // +2: room for CRLF
	*bp = buf
	if err == errLineTooLong || err == nil && content > lim.MaxRequestLine {
		return "", 0, 0, badRequest(tooLong, "the start line exceeds "+strconv.Itoa(lim.MaxRequestLine)+" bytes", true)
	}
	if err != nil {
		return "", 0, 0, err
	}
	if perr := checkStart(buf[:content]); perr != nil {
		return "", 0, 0, perr
	}
	startLen := len(buf)
	budget, n := lim.MaxHeaderBytes, 0
	for {
		mark := len(buf)
		buf, content, err = appendLine(br, buf, budget)
		*bp = buf
		switch err {
		case nil:
		case errLineTooLong:
			return "", 0, 0, badRequest(ReasonHeaderSectionTooLarge,
				"the header section exceeds "+strconv.Itoa(lim.MaxHeaderBytes)+" bytes", true)
		case io.EOF:
			return "", 0, 0, io.ErrUnexpectedEOF
		default:
			return "", 0, 0, err
		}
		budget -= len(buf) - mark
		if content == 0 {
			return string(buf), startLen, n, nil
		}
		if n++; n > lim.MaxHeaderFields {
			return "", 0, 0, tooManyFields(lim)
		}
	}
}

func tooManyFields(lim *Limits) *ProtocolError {
	return badRequest(ReasonTooManyHeaderFields, "more than "+strconv.Itoa(lim.MaxHeaderFields)+" header fields", true)
}

// bufferedHead returns the head if all of it is already buffered in br
// and within the limits. It consumes nothing otherwise, leaving the exact
// error, if any, to the line-by-line path.
func bufferedHead(br *bufio.Reader, lim *Limits) (string, int, int, bool) {
	b, _ := br.Peek(br.Buffered())
	i := bytes.IndexByte(b, '\n')
	if i < 0 || lineContent(b[:i]) > lim.MaxRequestLine {
		return "", 0, 0, false
	}
	startLen := i + 1
	pos, n := startLen, 0
	for {
		j := bytes.IndexByte(b[pos:], '\n')
		if j < 0 {
			return "", 0, 0, false
		}
		content := lineContent(b[pos : pos+j])
		pos += j + 1
		if pos-startLen > lim.MaxHeaderBytes {
			return "", 0, 0, false
		}
		if content == 0 {
			head := string(b[:pos])
			br.Discard(pos)
			return head, startLen, n, true
		}
		if n++; n > lim.MaxHeaderFields {
			return "", 0, 0, false
		}
	}
}

// lineContent is the length of a line without its CR (the LF is already
// excluded).
func lineContent(line []byte) int {
	if len(line) > 0 && line[len(line)-1] == '\r' {
		return len(line) - 1
	}
	return len(line)
}

// headBufPool holds the buffers a head that was not fully buffered is
// assembled in, so that the per-message cost stays one string.
var headBufPool = sync.Pool{New: func() any { b := make([]byte, 0, 2048); return &b }}

// maxPooledHead keeps buffers grown by unusually large heads (or large
// configured limits) out of the pool.
const maxPooledHead = 128 << 10

func putHeadBuf(bp *[]byte) {
	if cap(*bp) <= maxPooledHead {
		*bp = (*bp)[:0]
		headBufPool.Put(bp)
	}
}

// errLineTooLong is internal: callers turn it into the limit's reason.
var errLineTooLong = errors.New("agtp: line too long")

// appendLine appends the next line from br to dst, line ending (LF or
// CRLF) included, and returns the length of its content without the
// ending. No more than maxRaw bytes of the line are ever copied: past
// that it returns errLineTooLong. An input that ends before any byte of
// the line gives io.EOF; one that ends inside it, io.ErrUnexpectedEOF.
func appendLine(br *bufio.Reader, dst []byte, maxRaw int) ([]byte, int, error) {
	start := len(dst)
	for {
		chunk, err := br.ReadSlice('\n')
		if len(dst)-start+len(chunk) > maxRaw {
			return dst, 0, errLineTooLong
		}
		dst = append(dst, chunk...)
		switch err {
		case nil:
			return dst, lineContent(dst[start : len(dst)-1]), nil
		case bufio.ErrBufferFull:
			// The line is longer than br's buffer; keep copying.
		case io.EOF:
			if len(dst) == start {
				return dst, 0, io.EOF
			}
			return dst, 0, io.ErrUnexpectedEOF
		default:
			return dst, 0, err
		}
	}
}

// fieldStore returns storage for n fields: the message's inline array
// when it is large enough, so that typical messages allocate nothing here.
func fieldStore(inline *[inlineFields]Field, n int) Header {
	if n <= inlineFields {
		return inline[:0]
	}
	return make(Header, 0, n)
}

// parseFieldLines parses the field lines at the start of s, up to the
// empty line that ends them. One pass per line checks the name, finds
// the colon and checks the value, because this loop is most of the cost
// of reading a message.
func parseFieldLines(s string, h Header) (Header, *ProtocolError) {
	for len(s) > 0 && s[0] != '\n' && !strings.HasPrefix(s, "\r\n") {
		if s[0] == ' ' || s[0] == '\t' {
			// obs-fold (RFC 9112 §5.2): refusing it is simpler and safer
			// than unfolding, and no AGTP peer needs it.
			return nil, badRequest(ReasonInvalidHeader, "folded header line (obs-fold)", true)
		}
		i := 0
		for i < len(s) && charClass[s[i]]&cToken != 0 {
			i++
		}
		if i == len(s) || s[i] != ':' || i == 0 {
			return nil, fieldNameError(s, i)
		}
		j := valueEnd(s, i+1)
		end := j
		if j+1 < len(s) && s[j] == '\r' {
			j++
		}
		if j >= len(s) || s[j] != '\n' {
			return nil, badRequest(ReasonInvalidHeader, "control character in the value of "+s[:i], true)
		}
		h = append(h, Field{Name: CanonicalName(s[:i]), Value: trimOWS(s[i+1 : end])})
		s = s[j+1:]
	}
	return h, nil
}

// valueEnd returns the index of the first byte at or after j that may
// not appear in a field value (a control character other than HTAB, which
// includes the CR or LF ending the line). It checks eight bytes at a time
// while they are all plain (0x20-0x7E, or 0x80 and up), because values
// are most of a head's bytes; anything else, HTAB included, is left to the
// byte loop.
func valueEnd(s string, j int) int {
	const lo, hi = 0x0101010101010101, 0x8080808080808080
	for ; j+8 <= len(s); j += 8 {
		x := uint64(s[j]) | uint64(s[j+1])<<8 | uint64(s[j+2])<<16 | uint64(s[j+3])<<24 |
			uint64(s[j+4])<<32 | uint64(s[j+5])<<40 | uint64(s[j+6])<<48 | uint64(s[j+7])<<56
		del := x ^ 0x7f*lo // a zero byte where x has DEL
		// Exact test for "some byte < 0x20 or == 0x7F" (Bit Twiddling
		// Hacks, hasless and haszero); bytes >= 0x80 never trigger it.
		if ((x-0x20*lo)&^x|(del-lo)&^del)&hi != 0 {
			break
		}
	}
	for j < len(s) && charClass[s[j]]&cValue != 0 {
		j++
	}
	return j
}

// fieldNameError explains why the field line s has no valid name ending
// at i.
func fieldNameError(s string, i int) *ProtocolError {
	var why string
	switch {
	case i < len(s) && s[i] == ':':
		why = "empty header name"
	case i < len(s) && (s[i] == ' ' || s[i] == '\t'):
		// RFC 9112 §5.1 requires rejecting whitespace before the colon:
		// proxies disagree on it, which enables request smuggling.
		why = "whitespace between header name and ':'"
	case i == len(s) || s[i] == '\r' || s[i] == '\n':
		why = "header line without ':'"
	default:
		why = "invalid character " + strconv.QuoteRune(rune(s[i])) + " in header name"
	}
	return badRequest(ReasonInvalidHeader, why, true)
}

// framing applies core §5.4.1: Content-Length is the only framing, so
// its absence means no body, Transfer-Encoding is refused, and a body
// announced by Content-Type without a length cannot be delimited. In the
// same pass it returns the first retired field name, if any, so the
// fields are scanned once.
func framing(h Header) (n int64, retired string, perr *ProtocolError) {
	n = -1
	hasType := false
	for _, f := range h {
		// Parsed names are canonical, so == is exact here.
		switch f.Name {
		case HeaderTransferEncoding:
			return 0, "", badRequest(ReasonTransferEncodingUnsupported,
				"AGTP frames bodies by Content-Length only (core §5.4.1)", true)
		case HeaderContentLength:
			v, ok := parseContentLength(f.Value)
			if !ok {
				return 0, "", badRequest(ReasonInvalidContentLength, "Content-Length "+strconv.Quote(f.Value)+" is not a decimal length", true)
			}
			if n >= 0 && v != n {
				return 0, "", badRequest(ReasonInvalidContentLength, "conflicting Content-Length fields", true)
			}
			n = v
		case HeaderContentType:
			hasType = true
		case HeaderRetiredVersion, HeaderRetiredMethod, HeaderRetiredStatus,
			HeaderRetiredPrincipalID, HeaderRetiredServerAgentID:
			if retired == "" {
				retired = f.Name
			}
		}
	}
	if n < 0 {
		if hasType {
			return 0, "", badRequest(ReasonContentLengthRequired,
				"a message with Content-Type must carry Content-Length (core §5.4.1)", true)
		}
		n = 0
	}
	return n, retired, nil
}

// parseContentLength accepts 1*DIGIT, capped at 18 digits so the value
// fits in an int64 without overflow checks.
func parseContentLength(s string) (int64, bool) {
	if s == "" || len(s) > 18 {
		return 0, false
	}
	var n int64
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	return n, true
}

// firstBodyStep is the first size of a body buffer that grows: the
// default bufio.Reader size, so that a typical body is allocated once, at
// its exact size, while a peer that sends one byte of a large body pins
// no more than this.
const firstBodyStep = 4 << 10

// readBody reads an n-byte body into a buffer that grows as bytes arrive,
// doubling from firstBodyStep (or what br already holds) and capped at n;
// see Head.ReadBody for grow.
func readBody(br *bufio.Reader, n int64, grow func(int) error) ([]byte, error) {
	if n == 0 {
		return nil, nil
	}
	var body []byte
	for int64(len(body)) < n {
		if len(body) == cap(body) {
			// Wait for a byte before allocating, so a peer that stops
			// sending costs nothing more.
			if _, err := br.Peek(1); err != nil {
				return nil, unexpectedEOF(err)
			}
			size := int(min(n, int64(max(2*cap(body), firstBodyStep, len(body)+br.Buffered()))))
			if grow != nil {
				if err := grow(size - cap(body)); err != nil {
					return nil, err
				}
			}
			// A fresh buffer rather than append: append would round the
			// capacity up past n.
			grown := make([]byte, len(body), size)
			copy(grown, body)
			body = grown
		}
		m, err := br.Read(body[len(body):cap(body)])
		body = body[:len(body)+m]
		if err != nil && int64(len(body)) < n {
			return nil, unexpectedEOF(err)
		}
	}
	return body, nil
}

// unexpectedEOF maps the end of input inside a message to
// io.ErrUnexpectedEOF and returns other errors unchanged.
func unexpectedEOF(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

// requestLine holds offsets into the head buffer.
type requestLine struct {
	methodStart, methodEnd int
	targetStart, targetEnd int
	targetOmitted          bool
}

func invalidLine(explanation string) *ProtocolError {
	// The stream may not even be AGTP (an HTTP or TLS client on the
	// wrong port), so nothing after this line can be trusted.
	return badRequest(ReasonInvalidRequestLine, explanation, true)
}

// parseRequestLine checks "AGTP/1.0 SP method SP request-target" (core
// §5.5.1). A missing target ("AGTP/1.0 DISCOVER") means "/"
// (docs/decisions.md#D-request-target); everything else is strict. The
// method token is only split out here: its lexical rule gives 459, checked
// by the caller.
func parseRequestLine[T ~string | ~[]byte](line T, rl *requestLine) *ProtocolError {
	sp1, sp2 := -1, -1
	for i := 0; i < len(line); i++ {
		switch c := line[i]; {
		case c == '#':
			return invalidLine("'#' is not allowed on the request line (core §5.5.1)")
		case c == ' ':
			switch {
			case sp1 < 0:
				sp1 = i
			case sp2 < 0:
				sp2 = i
			default:
				return invalidLine("more than three tokens: tokens are separated by exactly one space")
			}
		case c < 0x20 || c > 0x7e:
			return invalidLine("control or non-ASCII byte on the request line")
		}
	}
	if sp1 < 0 {
		return invalidLine("expected \"AGTP/1.0 METHOD /path\"")
	}
	if string(line[:sp1]) != Version {
		if sp2 >= 0 && string(line[sp2+1:]) == Version {
			return invalidLine("the version comes first: \"AGTP/1.0 METHOD /path\", not HTTP order")
		}
		return invalidLine("the version must be AGTP/1.0")
	}
	rl.methodStart = sp1 + 1
	if sp2 < 0 {
		rl.methodEnd, rl.targetOmitted = len(line), true
	} else {
		rl.methodEnd, rl.targetStart, rl.targetEnd = sp2, sp2+1, len(line)
	}
	if rl.methodEnd == rl.methodStart {
		return invalidLine("empty method: tokens are separated by exactly one space")
	}
	if rl.targetOmitted {
		return nil
	}
	if p := targetProblem(line[rl.targetStart:]); p != "" {
		return invalidLine(p)
	}
	return nil
}

// checkTarget is targetProblem as an error, for callers outside the parser.
func checkTarget(target string) error {
	if strings.IndexByte(target, ' ') >= 0 {
		return invalidLine("request-target contains a space")
	}
	if p := targetProblem(target); p != "" {
		return invalidLine(p)
	}
	return nil
}

// targetProblem checks request-target = path-absolute [ "?" query ] with
// the RFC 3986 character sets; it returns "" when t is valid.
func targetProblem[T ~string | ~[]byte](t T) string {
	if len(t) == 0 || t[0] != '/' {
		return "the request-target must start with '/'"
	}
	if len(t) > 1 && t[1] == '/' {
		return "the request-target must not start with '//' (path-absolute)"
	}
	return charsProblem(t)
}

// charsProblem checks that t holds only pchar, '/', '?' and
// well-formed percent-encodings, which covers both path and query.
func charsProblem[T ~string | ~[]byte](t T) string {
	for i := 0; i < len(t); i++ {
		c := t[i]
		switch {
		case charClass[c]&cPchar != 0, c == '/', c == '?':
		case c == '%':
			if i+2 >= len(t) || charClass[t[i+1]]&cHex == 0 || charClass[t[i+2]]&cHex == 0 {
				return "malformed percent-encoding in the request-target"
			}
			i += 2
		case c == '#':
			return "'#' is not allowed on the request line (core §5.5.1)"
		default:
			return "character " + strconv.QuoteRune(rune(c)) + " is not allowed in the request-target"
		}
	}
	return ""
}

// parseStatusLine checks "AGTP/1.0 SP 3DIGIT SP status-text" (core
// §5.5.2). A line that ends right after the code is accepted too: the
// text carries no meaning, so its absence loses nothing.
func parseStatusLine[T ~string | ~[]byte](line T) (int, *ProtocolError) {
	const prefix = Version + " "
	bad := func(why string) (int, *ProtocolError) {
		return 0, badRequest(ReasonInvalidStatusLine, why, true)
	}
	if len(line) < len(prefix)+3 || string(line[:len(prefix)]) != prefix {
		return bad("expected \"AGTP/1.0 NNN text\"")
	}
	d := line[len(prefix) : len(prefix)+3]
	if d[0] < '1' || d[0] > '9' || d[1] < '0' || d[1] > '9' || d[2] < '0' || d[2] > '9' {
		return bad("the status code must be three digits, 100-999")
	}
	status := int(d[0]-'0')*100 + int(d[1]-'0')*10 + int(d[2]-'0')
	rest := line[len(prefix)+3:]
	if len(rest) > 0 {
		if rest[0] != ' ' {
			return bad("expected a space after the status code")
		}
		for i := 1; i < len(rest); i++ {
			if charClass[rest[i]]&cText == 0 {
				return bad("control character in the status text")
			}
		}
	}
	return status, nil
}
