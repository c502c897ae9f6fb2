package transport

import "sync/atomic"

// Stats is a snapshot of the server's counters, for metrics. Counters only
// grow; the Open fields are gauges.
type Stats struct {
	// Open connections now, per transport.
	OpenTCP, OpenQUIC int64
	// Connections accepted since start, per transport.
	AcceptedTCP, AcceptedQUIC uint64
	// Requests read and answered (including those answered with an
	// error by the transport), per transport.
	RequestsTCP, RequestsQUIC uint64
	// InFlight is the number of requests being served now: receiving
	// their body or in the handler.
	InFlight int
	// BodyBytes is the part of BodyBudget that request bodies hold now.
	BodyBytes int64
	// Handshakes is the number of TLS and QUIC handshakes in progress now
	// (bounded by MaxHandshakes).
	Handshakes int

	// Rejections and abnormal closes, by reason.
	Busy             uint64 // 503 server-busy: MaxInFlight full for BusyWait
	BodyBudget       uint64 // 503 body-budget-exhausted: BodyBudget held by other bodies for BusyWait
	TooEarly         uint64 // 425 too-early: non-QUERY/DISCOVER in QUIC 0-RTT data
	ProtocolErrors   uint64 // wire errors answered (400, 459, ...)
	HandshakeFailed  uint64 // TLS/QUIC handshake failed or timed out, or not TLS at all
	HeaderTimeouts   uint64 // request line + headers not complete within HeaderTimeout
	BodyTimeouts     uint64 // body not complete within BodyTimeout
	IdleTimeouts     uint64 // connections closed after IdleTimeout without a request
	ConnLimitWaits   uint64 // TCP accept loop paused at MaxConns
	QUICRefused      uint64 // QUIC connections refused at MaxConns
	PerIPRefused     uint64 // TCP connections reset and QUIC attempts refused at MaxConnsPerIP
	HandshakesShed   uint64 // handshakes older than a second closed to make room at MaxHandshakes
	HandshakeLimit   uint64 // TCP accept paused, or QUIC attempt refused, at MaxHandshakes with none to shed
	QUICRetries      uint64 // QUIC Retry required (handshake rate above QUICRetryAbove)
	Panics           uint64 // handler (or error responder) panics, answered 500
	InvalidResponses uint64 // nil or unwritable handler responses, answered 500

	// Certificate reloads that succeeded and that failed (old pair kept).
	CertReloads, CertReloadFailures uint64
}

// Rejections returns the rejection counters keyed by a stable reason
// label, for a metrics counter with a "reason" attribute.
func (st Stats) Rejections() map[string]uint64 {
	return map[string]uint64{
		"server_busy":       st.Busy,
		"body_budget":       st.BodyBudget,
		"too_early":         st.TooEarly,
		"protocol_error":    st.ProtocolErrors,
		"handshake_failed":  st.HandshakeFailed,
		"header_timeout":    st.HeaderTimeouts,
		"body_timeout":      st.BodyTimeouts,
		"idle_timeout":      st.IdleTimeouts,
		"conn_limit":        st.ConnLimitWaits,
		"quic_refused":      st.QUICRefused,
		"per_ip_refused":    st.PerIPRefused,
		"handshake_shed":    st.HandshakesShed,
		"handshake_limit":   st.HandshakeLimit,
		"quic_retry":        st.QUICRetries,
		"panic":             st.Panics,
		"invalid_response":  st.InvalidResponses,
		"cert_reload_error": st.CertReloadFailures,
	}
}

type counters struct {
	tcpOpen, quicOpen                       atomic.Int64
	tcpAccepted, quicAccepted               atomic.Uint64
	tcpRequests, quicRequests               atomic.Uint64
	busy, tooEarly, protocolErrors          atomic.Uint64
	bodyBudget                              atomic.Uint64
	handshakeFailed                         atomic.Uint64
	headerTimeouts, bodyTimeouts, idleTimes atomic.Uint64
	connLimitWaits, quicRefused, quicRetry  atomic.Uint64
	perAddrRefused                          atomic.Uint64
	handshakesShed, handshakeLimit          atomic.Uint64
	panics, invalidResponses                atomic.Uint64
	certReloads, certReloadFailures         atomic.Uint64
}

// Stats returns a snapshot of the counters.
func (s *Server) Stats() Stats {
	c := &s.stats
	return Stats{
		OpenTCP: c.tcpOpen.Load(), OpenQUIC: c.quicOpen.Load(),
		AcceptedTCP: c.tcpAccepted.Load(), AcceptedQUIC: c.quicAccepted.Load(),
		RequestsTCP: c.tcpRequests.Load(), RequestsQUIC: c.quicRequests.Load(),
		InFlight:           len(s.inflight),
		BodyBytes:          s.bodies.inUse.Load(),
		Handshakes:         s.hs.len(),
		Busy:               c.busy.Load(),
		BodyBudget:         c.bodyBudget.Load(),
		TooEarly:           c.tooEarly.Load(),
		ProtocolErrors:     c.protocolErrors.Load(),
		HandshakeFailed:    c.handshakeFailed.Load(),
		HeaderTimeouts:     c.headerTimeouts.Load(),
		BodyTimeouts:       c.bodyTimeouts.Load(),
		IdleTimeouts:       c.idleTimes.Load(),
		ConnLimitWaits:     c.connLimitWaits.Load(),
		QUICRefused:        c.quicRefused.Load(),
		PerIPRefused:       c.perAddrRefused.Load(),
		HandshakesShed:     c.handshakesShed.Load(),
		HandshakeLimit:     c.handshakeLimit.Load(),
		QUICRetries:        c.quicRetry.Load(),
		Panics:             c.panics.Load(),
		InvalidResponses:   c.invalidResponses.Load(),
		CertReloads:        c.certReloads.Load(),
		CertReloadFailures: c.certReloadFailures.Load(),
	}
}
