// Package archive writes every record auditsvc appends to rotated,
// append-only JSON Lines files (attribution.Entry per line), as a second
// copy outside Redis.
//
// The sink is fed off the hot path: Offer never blocks an append. Its queue
// is bounded; when the disk cannot keep up, entries that do not fit are
// counted and logged (with chain and sequence) rather than buffered without
// limit, and they remain in Redis, from where an export fills the hole.
package archive

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agtpsuite/agtp/auditsvc/attribution"
)

// Options configure a sink.
type Options struct {
	// Dir holds the archive files. Empty disables the sink.
	Dir string
	// Instance names this process in file names, so replicas sharing a
	// directory never write one file (default: random).
	Instance string
	// MaxFileBytes rotates a file once it reaches this size (default 64 MiB).
	MaxFileBytes int64
	// MaxFileAge rotates a file this long after it was opened (default 1 h).
	MaxFileAge time.Duration
	// Queue bounds the entries waiting to be written (default 65536).
	Queue int
	// SyncInterval is how often written data is flushed and fsynced
	// (default 1 s). Rotation always fsyncs the closed file.
	SyncInterval time.Duration
	// Now is the clock for file names and rotation (default time.Now).
	Now func() time.Time
}

// Enabled reports whether the options turn the sink on.
func (o Options) Enabled() bool { return o.Dir != "" }

// Validate reports options that cannot work.
func (o Options) Validate() error {
	var errs []error
	if o.MaxFileBytes < 0 || o.MaxFileAge < 0 || o.Queue < 0 || o.SyncInterval < 0 {
		errs = append(errs, errors.New("archive: negative option"))
	}
	if o.Instance != "" && filepath.Base(o.Instance) != o.Instance {
		errs = append(errs, fmt.Errorf("archive: instance %q must not contain a path separator", o.Instance))
	}
	return errors.Join(errs...)
}

func (o Options) withDefaults() Options {
	if o.Instance == "" {
		o.Instance = rand.Text()[:10]
	}
	if o.MaxFileBytes == 0 {
		o.MaxFileBytes = 64 << 20
	}
	if o.MaxFileAge == 0 {
		o.MaxFileAge = time.Hour
	}
	if o.Queue == 0 {
		o.Queue = 65536
	}
	if o.SyncInterval == 0 {
		o.SyncInterval = time.Second
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return o
}

// Sink is the archive writer.
type Sink struct {
	opts Options
	log  *slog.Logger
	q    chan attribution.Entry

	written, dropped, writeErrors atomic.Uint64

	dropMu    sync.Mutex
	lastDrop  attribution.Entry
	dropsSeen uint64 // drops already reported

	// stopped is set by Run before its last drain; an Offer holds stopMu
	// for reading from its check to its send, so every entry queued
	// before that is drained, and every later one is dropped.
	stopMu  sync.RWMutex
	stopped bool

	// writer state, owned by Run
	f         *os.File
	w         *bufio.Writer
	size      int64
	opened    time.Time
	seq       int
	current   string
	unflushed int // entries buffered since the last flush
}

// New checks the directory and returns a sink; Run writes.
func New(opts Options, log *slog.Logger) (*Sink, error) {
	opts, err := prepare(opts)
	if err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Sink{opts: opts, log: log, q: make(chan attribution.Entry, opts.Queue)}, nil
}

// Offer queues an entry without blocking. A full queue drops the entry
// from the archive (it stays in Redis) and counts it. After Run stopped
// nothing reads the queue: the entry is counted as dropped and logged,
// since no later report will name it.
func (s *Sink) Offer(e attribution.Entry) {
	s.stopMu.RLock()
	defer s.stopMu.RUnlock()
	if s.stopped {
		s.dropped.Add(1)
		s.log.Error("archive sink stopped: record not archived (it remains in Redis; export to fill the gap)",
			"stream", e.Stream, "chain", e.Chain, "sequence", e.Sequence, "audit_id", e.AuditID)
		return
	}
	select {
	case s.q <- e:
	default:
		s.dropped.Add(1)
		s.dropMu.Lock()
		s.lastDrop = e
		s.dropMu.Unlock()
	}
}

// Stats are the sink's counters. Written counts entries flushed to a file;
// Dropped those the full queue refused; WriteErrors those lost to a failed
// write.
type Stats struct {
	Written, Dropped, WriteErrors uint64
	Queued                        int
}

// Stats returns the counters.
func (s *Sink) Stats() Stats {
	return Stats{s.written.Load(), s.dropped.Load(), s.writeErrors.Load(), len(s.q)}
}

// Run writes queued entries until ctx is done, then writes what is still
// queued and closes the file. Entries offered after that are dropped.
func (s *Sink) Run(ctx context.Context) error {
	tick := time.NewTicker(s.opts.SyncInterval)
	defer tick.Stop()
	defer s.closeFile()
	for {
		select {
		case e := <-s.q:
			s.write(e)
			s.drain(1024) // what else is queued, before looking at the clock
		case <-tick.C:
			s.sync()
			if s.f != nil && s.opts.Now().Sub(s.opened) >= s.opts.MaxFileAge {
				s.closeFile()
			}
			s.reportDrops()
		case <-ctx.Done():
			s.stopMu.Lock()
			s.stopped = true
			s.stopMu.Unlock()
			s.drain(-1)
			s.reportDrops()
			return nil
		}
	}
}

// drain writes up to max queued entries (max < 0: all) without waiting.
func (s *Sink) drain(max int) {
	for n := 0; max < 0 || n < max; n++ {
		select {
		case e := <-s.q:
			s.write(e)
		default:
			return
		}
	}
}

func (s *Sink) write(e attribution.Entry) {
	line, err := json.Marshal(e)
	if err != nil {
		s.fail(e, err)
		return
	}
	line = append(line, '\n')
	if s.f != nil && s.size+int64(len(line)) > s.opts.MaxFileBytes && s.size > 0 {
		s.closeFile()
	}
	if s.f == nil {
		if err := s.open(); err != nil {
			s.fail(e, err)
			return
		}
	}
	s.unflushed++
	if _, err := s.w.Write(line); err != nil {
		s.lost(err)
		return
	}
	s.size += int64(len(line))
}

// lost accounts for the buffered entries a failed write or flush took
// with it, and drops the file; the next write opens a new one.
func (s *Sink) lost(err error) {
	s.writeErrors.Add(uint64(s.unflushed))
	s.log.Error("archive write failed; buffered records lost from the archive remain in Redis",
		"file", s.current, "records", s.unflushed, "err", err)
	s.unflushed = 0
	s.abandonFile()
}

// fail counts an entry the archive lost and says which one.
func (s *Sink) fail(e attribution.Entry, err error) {
	s.writeErrors.Add(1)
	s.log.Error("archive write failed; the record remains in Redis", "stream", e.Stream, "chain", e.Chain,
		"sequence", e.Sequence, "audit_id", e.AuditID, "err", err)
}

func (s *Sink) reportDrops() {
	d := s.dropped.Load()
	if d == s.dropsSeen {
		return
	}
	s.dropMu.Lock()
	last := s.lastDrop
	s.dropMu.Unlock()
	s.log.Error("archive queue full: records dropped from the archive (they remain in Redis; export to fill the gap)",
		"dropped_since_last_report", d-s.dropsSeen, "dropped_total", d,
		"last_stream", last.Stream, "last_chain", last.Chain, "last_sequence", last.Sequence)
	s.dropsSeen = d
}

func (s *Sink) open() error {
	now := s.opts.Now().UTC()
	for {
		s.seq++
		name := filepath.Join(s.opts.Dir, fmt.Sprintf("audit-%s-%s-%06d.jsonl", s.opts.Instance, now.Format("20060102T150405Z"), s.seq))
		f, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL|os.O_APPEND, 0o640)
		if errors.Is(err, os.ErrExist) {
			continue
		}
		if err != nil {
			return err
		}
		s.f, s.w, s.size, s.opened, s.current = f, bufio.NewWriterSize(f, 256<<10), 0, now, name
		return nil
	}
}

func (s *Sink) sync() {
	if s.f == nil {
		return
	}
	if err := s.w.Flush(); err != nil {
		s.lost(err)
		return
	}
	s.written.Add(uint64(s.unflushed))
	s.unflushed = 0
	if err := s.f.Sync(); err != nil {
		s.log.Error("archive fsync failed", "file", s.current, "err", err)
		s.writeErrors.Add(1)
	}
}

func (s *Sink) closeFile() {
	if s.f == nil {
		return
	}
	s.sync()
	if s.f != nil {
		if err := s.f.Close(); err != nil {
			s.log.Error("archive close failed", "file", s.current, "err", err)
		}
	}
	s.f, s.w = nil, nil
}

// abandonFile drops a file that failed; the next write opens a new one.
func (s *Sink) abandonFile() {
	if s.f != nil {
		_ = s.f.Close()
	}
	s.f, s.w = nil, nil
}

// Moved writes the records the retention task moves out of Redis to their
// own archive files ("audit-moved-<instance>-<time>-<n>.jsonl", the same
// JSON Lines format), synchronously: Write returns once the entries are
// fsynced, so the caller may then remove them from Redis. It does not go
// through the sink's bounded queue. A Moved is used by one goroutine.
type Moved struct {
	dir, instance string
	now           func() time.Time
	f             *os.File
	seq           int
}

// NewMoved returns a writer of moved records into opts.Dir; the file is
// created by the first Write.
func NewMoved(opts Options) (*Moved, error) {
	opts, err := prepare(opts)
	if err != nil {
		return nil, err
	}
	return &Moved{dir: opts.Dir, instance: opts.Instance, now: opts.Now}, nil
}

// prepare validates the options of a writer, fills in the defaults and
// creates the directory.
func prepare(opts Options) (Options, error) {
	if err := opts.Validate(); err != nil {
		return opts, err
	}
	if !opts.Enabled() {
		return opts, errors.New("archive: no directory configured")
	}
	opts = opts.withDefaults()
	if err := os.MkdirAll(opts.Dir, 0o750); err != nil {
		return opts, fmt.Errorf("archive: %w", err)
	}
	return opts, nil
}

// Write appends es and fsyncs the file (and, after creating it, the
// directory).
func (m *Moved) Write(es []attribution.Entry) error {
	if len(es) == 0 {
		return nil
	}
	var buf []byte
	for _, e := range es {
		line, err := json.Marshal(e)
		if err != nil {
			return fmt.Errorf("archive: %w", err)
		}
		buf = append(append(buf, line...), '\n')
	}
	if m.f == nil {
		if err := m.open(); err != nil {
			return err
		}
	}
	if _, err := m.f.Write(buf); err != nil {
		m.Close()
		return fmt.Errorf("archive: %w", err)
	}
	if err := m.f.Sync(); err != nil {
		m.Close()
		return fmt.Errorf("archive: fsync: %w", err)
	}
	return nil
}

func (m *Moved) open() error {
	now := m.now().UTC()
	for {
		m.seq++
		name := filepath.Join(m.dir, fmt.Sprintf("audit-moved-%s-%s-%06d.jsonl", m.instance, now.Format("20060102T150405Z"), m.seq))
		f, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL|os.O_APPEND, 0o640)
		if errors.Is(err, os.ErrExist) {
			continue
		}
		if err != nil {
			return fmt.Errorf("archive: %w", err)
		}
		if d, err := os.Open(m.dir); err == nil {
			err = d.Sync()
			_ = d.Close()
			if err != nil {
				_ = f.Close()
				return fmt.Errorf("archive: fsync directory: %w", err)
			}
		}
		m.f = f
		return nil
	}
}

// Close closes the current file; the next Write starts a new one.
func (m *Moved) Close() {
	if m.f != nil {
		_ = m.f.Close()
		m.f = nil
	}
}
