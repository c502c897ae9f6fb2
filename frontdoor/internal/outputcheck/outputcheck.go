// Package outputcheck decides which results of the front door's in-process
// handlers are validated against their endpoint's output schema
// (AGTP_OUTPUT_VALIDATION; docs/frontdoor.md, "Output validation").
//
// The check protects callers from a handler that drifts from its declared
// contract; it protects nothing that the handler's own tests do not, and
// on every response it cost about a tenth of the front door's CPU (a JSON
// decode of the result and a schema walk). Sampling keeps a drifting
// handler visible (a 500 output-invalid and an error log line naming the
// violations) at a hundredth of the cost.
package outputcheck

import (
	"fmt"
	"sync/atomic"
)

// Mode is how many handler results are validated.
type Mode string

// The modes.
const (
	// Off validates none.
	Off Mode = "off"
	// Sampled validates one result in SampleEvery (the default).
	Sampled Mode = "sampled"
	// On validates every result.
	On Mode = "on"
)

// SampleEvery is the sampling period of Sampled: the first result and
// every SampleEvery-th after it are validated.
const SampleEvery = 100

// Default is the mode when none is configured.
const Default = Sampled

// ParseMode reads a configured mode; empty is Default.
func ParseMode(s string) (Mode, error) {
	switch m := Mode(s); m {
	case "":
		return Default, nil
	case Off, Sampled, On:
		return m, nil
	}
	return "", fmt.Errorf("output validation %q is not off, sampled or on", s)
}

// Sampler decides, result by result, whether to validate. A nil Sampler
// validates every result (On).
type Sampler struct {
	mode Mode
	n    atomic.Uint64
}

// New is a Sampler for mode.
func New(mode Mode) *Sampler { return &Sampler{mode: mode} }

// Due reports whether the next result is to be validated.
func (s *Sampler) Due() bool {
	if s == nil {
		return true
	}
	switch s.mode {
	case Off:
		return false
	case Sampled:
		return (s.n.Add(1)-1)%SampleEvery == 0
	}
	return true
}
