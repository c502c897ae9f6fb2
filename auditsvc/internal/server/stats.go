package server

import "github.com/agtpsuite/agtp/auditsvc/internal/archive"

// ArchiveStats are the archive sink's counters, and false when the sink
// is off.
func (s *Server) ArchiveStats() (archive.Stats, bool) {
	if s.sink == nil {
		return archive.Stats{}, false
	}
	return s.sink.Stats(), true
}
