package agtp

import (
	"encoding/json"
	"errors"
	"maps"
	"slices"
	"strconv"
)

// ErrorBody is the body of every AGTP error response
// (docs/decisions.md#D-error-body):
//
//	{"status":459,"reason":"method-invalid","explanation":"...","task_id":"t-1","method":"frob"}
//
// Status, reason and explanation are always present; task_id only when
// TaskID is set. Extra holds the members a code requires (405
// allowed_methods_for_path, 459 method and catalog_version, 460 segment,
// ...) and is flattened into the same object, keys in sorted order so
// that equal bodies are equal bytes. An Extra key that names a fixed
// member is ignored on output, because the fixed members are what
// clients dispatch on.
type ErrorBody struct {
	Status      int
	Reason      string
	Explanation string
	TaskID      string
	Extra       map[string]any
}

var fixedErrorMembers = map[string]bool{"status": true, "reason": true, "explanation": true, "task_id": true}

// MarshalJSON implements json.Marshaler.
func (e ErrorBody) MarshalJSON() ([]byte, error) {
	b := make([]byte, 0, 96+len(e.Explanation))
	b = append(b, `{"status":`...)
	b = strconv.AppendInt(b, int64(e.Status), 10)
	b = append(b, `,"reason":`...)
	b = appendJSON(b, e.Reason)
	b = append(b, `,"explanation":`...)
	b = appendJSON(b, e.Explanation)
	if e.TaskID != "" {
		b = append(b, `,"task_id":`...)
		b = appendJSON(b, e.TaskID)
	}
	for _, k := range slices.Sorted(maps.Keys(e.Extra)) {
		if fixedErrorMembers[k] {
			continue
		}
		v, err := json.Marshal(e.Extra[k])
		if err != nil {
			return nil, err
		}
		b = append(b, ',')
		b = appendJSON(b, k)
		b = append(b, ':')
		b = append(b, v...)
	}
	return append(b, '}'), nil
}

func appendJSON(b []byte, s string) []byte {
	v, _ := json.Marshal(s) // a string always marshals
	return append(b, v...)
}

// UnmarshalJSON implements json.Unmarshaler. Members other than the
// fixed four land in Extra.
func (e *ErrorBody) UnmarshalJSON(data []byte) error {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(data, &m); err != nil {
		return err
	}
	if m == nil {
		return errors.New("agtp: error body is not a JSON object")
	}
	*e = ErrorBody{}
	for k, raw := range m {
		var err error
		switch k {
		case "status":
			err = json.Unmarshal(raw, &e.Status)
		case "reason":
			err = json.Unmarshal(raw, &e.Reason)
		case "explanation":
			err = json.Unmarshal(raw, &e.Explanation)
		case "task_id":
			err = json.Unmarshal(raw, &e.TaskID)
		default:
			var v any
			if err = json.Unmarshal(raw, &v); err == nil {
				if e.Extra == nil {
					e.Extra = make(map[string]any)
				}
				e.Extra[k] = v
			}
		}
		if err != nil {
			return errors.New("agtp: error body member " + strconv.Quote(k) + ": " + err.Error())
		}
	}
	return nil
}

// Response returns e as a response with status e.Status. It fails only
// if a value in Extra cannot be marshalled.
func (e ErrorBody) Response() (*Response, error) {
	body, err := e.MarshalJSON()
	if err != nil {
		return nil, err
	}
	return NewResponse(e.Status, MediaTypeJSON, body), nil
}

// NewErrorResponse returns an error response with an [ErrorBody] holding
// status, reason and explanation. Add TaskID or code-specific members
// with an ErrorBody and its Response method instead.
func NewErrorResponse(status int, reason, explanation string) *Response {
	r, _ := ErrorBody{Status: status, Reason: reason, Explanation: explanation}.Response() // no Extra: cannot fail
	return r
}
