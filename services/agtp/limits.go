package agtp

// Default limits (docs/decisions.md#D-limits). The drafts set no maximum
// (core §5.4.1 leaves it open); these keep one peer from holding unbounded
// memory.
const (
	DefaultMaxRequestLine  = 8 << 10  // bytes of the request or status line, line ending excluded
	DefaultMaxHeaderBytes  = 64 << 10 // bytes of the header section, see Limits.MaxHeaderBytes
	DefaultMaxHeaderFields = 100
	DefaultMaxBody         = 1 << 20
)

// Limits bounds what ReadRequest and ReadResponse accept. Exceeding any
// limit yields a *ProtocolError with status 400, a reason naming the
// limit, and CloseConnection set, because the unread rest of the message
// leaves the stream unframed.
//
// A zero field means the default, so Limits{} is usable; there is no
// "unlimited".
type Limits struct {
	// MaxRequestLine bounds the request line (or, for responses, the
	// status line), not counting its line ending.
	MaxRequestLine int
	// MaxHeaderBytes bounds the header section: every byte after the
	// start line up to and including the empty line that ends it, line
	// endings counted as received.
	MaxHeaderBytes int
	// MaxHeaderFields bounds the number of field lines.
	MaxHeaderFields int
	// MaxBody bounds Content-Length.
	MaxBody int64
	// BodyLimit, when set, returns the body limit for one request in
	// place of MaxBody, so an endpoint can accept larger (or no) bodies.
	// It is called once per request that announces a body, after the
	// header section is read, with the method and raw path; a result <= 0
	// allows no body. A request without a body never calls it.
	// ReadResponse does not call it.
	BodyLimit func(method, path string) int64
}

// DefaultLimits returns the project defaults.
func DefaultLimits() Limits {
	return Limits{
		MaxRequestLine:  DefaultMaxRequestLine,
		MaxHeaderBytes:  DefaultMaxHeaderBytes,
		MaxHeaderFields: DefaultMaxHeaderFields,
		MaxBody:         DefaultMaxBody,
	}
}

func (l Limits) withDefaults() Limits {
	if l.MaxRequestLine <= 0 {
		l.MaxRequestLine = DefaultMaxRequestLine
	}
	if l.MaxHeaderBytes <= 0 {
		l.MaxHeaderBytes = DefaultMaxHeaderBytes
	}
	if l.MaxHeaderFields <= 0 {
		l.MaxHeaderFields = DefaultMaxHeaderFields
	}
	if l.MaxBody <= 0 {
		l.MaxBody = DefaultMaxBody
	}
	return l
}
