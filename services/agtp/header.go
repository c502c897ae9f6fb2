package agtp

// Field is one header field line: a name and its value with surrounding
// whitespace removed.
type Field struct {
	Name  string
	Value string
}

// Header is a message's header section in the order received or set.
//
// Names compare case-insensitively. A slice is used instead of a map
// because an AGTP message carries about ten fields: a linear scan over
// them is faster than hashing, keeps wire order for logs and signatures,
// and lets the parser fill it without allocating per field.
//
// A Header obtained by copying a Request or Response shares storage with
// the original; use [Header.Clone] before modifying a copy.
type Header []Field

// Get returns the value of the first field named name, or "".
func (h Header) Get(name string) string {
	for i := range h {
		if equalFold(h[i].Name, name) {
			return h[i].Value
		}
	}
	return ""
}

// Lookup is like Get but also reports whether the field is present, so
// an empty value can be told apart from an absent field.
func (h Header) Lookup(name string) (string, bool) {
	for i := range h {
		if equalFold(h[i].Name, name) {
			return h[i].Value, true
		}
	}
	return "", false
}

// Has reports whether a field named name is present.
func (h Header) Has(name string) bool {
	_, ok := h.Lookup(name)
	return ok
}

// Values returns the values of every field named name, in order.
func (h Header) Values(name string) []string {
	var vs []string
	for i := range h {
		if equalFold(h[i].Name, name) {
			vs = append(vs, h[i].Value)
		}
	}
	return vs
}

// Add appends a field. The name is stored in the draft's spelling when
// the package knows it (see [CanonicalName]) and the value is trimmed of
// surrounding spaces and tabs.
func (h *Header) Add(name, value string) {
	*h = append(*h, Field{Name: CanonicalName(name), Value: trimOWS(value)})
}

// Set replaces every field named name with a single field holding value,
// keeping the position of the first one.
func (h *Header) Set(name, value string) {
	name, value = CanonicalName(name), trimOWS(value)
	s := *h
	for i := range s {
		if equalFold(s[i].Name, name) {
			s[i] = Field{Name: name, Value: value}
			*h = append(s[:i+1], s[i+1:].without(name)...)
			return
		}
	}
	*h = append(s, Field{Name: name, Value: value})
}

// Del removes every field named name.
func (h *Header) Del(name string) {
	*h = h.without(name)
}

// without filters h in place.
func (h Header) without(name string) Header {
	out := h[:0]
	for _, f := range h {
		if !equalFold(f.Name, name) {
			out = append(out, f)
		}
	}
	clear(h[len(out):]) // drop references held beyond the new length
	return out
}

// Clone returns a copy of h that shares no storage with it.
func (h Header) Clone() Header {
	if h == nil {
		return nil
	}
	return append(Header(nil), h...)
}

// equalFold compares two strings ignoring ASCII case only. Field names
// are ASCII tokens, and Unicode folding (strings.EqualFold maps the
// Kelvin sign to "k") would let a non-token name alias a real one.
func equalFold(a, b string) bool {
	if len(a) != len(b) {
		return false
	}
	if a == b { // the usual case: both spelled as the draft spells them
		return true
	}
	for i := 0; i < len(a); i++ {
		if a[i] != b[i] && lower(a[i]) != lower(b[i]) {
			return false
		}
	}
	return true
}

func lower(c byte) byte {
	if 'A' <= c && c <= 'Z' {
		return c + ('a' - 'A')
	}
	return c
}

// trimOWS removes optional whitespace (SP and HTAB, RFC 9110 §5.6.3).
func trimOWS(s string) string {
	for len(s) > 0 && (s[0] == ' ' || s[0] == '\t') {
		s = s[1:]
	}
	for len(s) > 0 && (s[len(s)-1] == ' ' || s[len(s)-1] == '\t') {
		s = s[:len(s)-1]
	}
	return s
}

// Character classes, as tables so the hot loops cost one load per byte.
const (
	cToken = 1 << iota // tchar, RFC 9110 §5.6.2
	cValue             // field-vchar, SP or HTAB (RFC 9110 §5.5); obs-text allowed
	cPchar             // pchar minus '%' (RFC 3986 §3.3); '%' is checked as pct-encoded
	cHex               // HEXDIG
	cText              // status-text: VCHAR, SP, HTAB, obs-text
)

var charClass = func() (t [256]uint8) {
	for c := 0; c < 256; c++ {
		b := byte(c)
		isAlpha := 'a' <= b && b <= 'z' || 'A' <= b && b <= 'Z'
		isDigit := '0' <= b && b <= '9'
		if isAlpha || isDigit {
			t[c] |= cToken | cPchar
		}
		switch b {
		case '!', '#', '$', '%', '&', '\'', '*', '+', '-', '.', '^', '_', '`', '|', '~':
			t[c] |= cToken
		}
		switch b {
		case '-', '.', '_', '~', // unreserved
			'!', '$', '&', '\'', '(', ')', '*', '+', ',', ';', '=', // sub-delims
			':', '@':
			t[c] |= cPchar
		}
		if isDigit || 'a' <= b && b <= 'f' || 'A' <= b && b <= 'F' {
			t[c] |= cHex
		}
		if b == ' ' || b == '\t' || (0x21 <= b && b <= 0x7e) || b >= 0x80 {
			t[c] |= cValue | cText
		}
	}
	return t
}()

// validToken reports whether s is a non-empty RFC 9110 token.
func validToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if charClass[s[i]]&cToken == 0 {
			return false
		}
	}
	return true
}

// validValue reports whether s may appear as a field value: no control
// characters other than HTAB, which rules out CR and LF injection.
func validValue(s string) bool {
	return valueEnd(s, 0) == len(s)
}

// PrintableASCII reports whether s holds printable ASCII only (space
// through tilde). The wire takes other bytes in field values (obs-text),
// but a value that goes on into a signed record, a protobuf string or a
// key must be plain text.
func PrintableASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}
