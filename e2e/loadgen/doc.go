// Package loadgen is the suite's bounded AGTP load generator: it sends a
// weighted mix of AGTP requests (DISCOVER, DESCRIBE, calls to the demo
// endpoints, idempotent CREATEs and their replays, INSPECT, PROPOSE) to a
// front door, over persistent TLS connections, a new TLS connection per
// request, or QUIC streams, closed loop (as fast as C workers go) or open
// loop (a fixed offered rate, latency counted from when each request was
// due). It records latency in fixed-size log-linear histograms, counts
// responses by status and failures by transport error, and measures the
// CPU time of named processes from /proc over the measured window.
//
// Every run is bounded in time, concurrency and rate (see the Max
// constants), and stops by itself. The generator speaks AGTP through the
// wire package (agtp.Request.Write, agtp.ReadResponse) on connections it
// manages itself, so that new-connection runs pay every handshake, and
// nothing is hidden by a client's pool.
//
// MeasureIdle is the idle-connection memory test; PlotSVG draws a
// latency-against-load sweep. The benchmark that drives all of this
// against the suite's processes is e2e.Bench (`make bench`).
package loadgen
