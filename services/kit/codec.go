package kit

import (
	"fmt"
	"math/bits"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	grpcproto "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/experimental"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/protoadapt"
)

// The suite's internal gRPC connections move batches of signed records:
// a SignAndAppendBatch answer of 16 to 40 records is 20 to 50 KB. grpc-go's
// default buffer pool has tiers of 256 B, 4, 16 and 32 KiB and then 1 MiB,
// and clears the whole capacity of every buffer it hands out again. So a
// 40 KB message, copied into one buffer to be unmarshalled (it arrives in
// several 16 KiB frames) or marshalled into one to be sent, cost a clear of
// 1 MiB, which also evicts the core's cache: 3 % of the front door's CPU
// and 2 % of auditsvc's at 64 requests in flight (docs/performance.md,
// "Buffers of the internal connections").
//
// internalBuffers has a tier at every power of two, so a buffer is at
// most twice its contents, and does not clear: every user of a buffer
// from it overwrites the length it asked for before reading it (the
// HTTP/2 framer reads a frame's payload with io.ReadFull, a message is
// copied or marshalled into exactly its length), and nothing reads past
// that length. What a buffer held before is this process's own traffic.
var internalBuffers = newBufferPool(minPooledShift, maxPooledShift)

const (
	// Below 256 B a buffer is cheaper to allocate than to pool; grpc-go
	// pools from 1 KiB (mem.BufferPoolingThreshold) anyway.
	minPooledShift = 8
	// Above 8 MiB (the servers' largest message, grpc.MaxRecvMsgSize) a
	// buffer is allocated and left to the collector.
	maxPooledShift = 23
)

// bufferPool is a mem.BufferPool of uncleared buffers with a tier at
// every power of two from 1<<minShift to 1<<maxShift bytes.
type bufferPool struct {
	minShift int
	tiers    []sync.Pool
}

var _ mem.BufferPool = (*bufferPool)(nil)

func newBufferPool(minShift, maxShift int) *bufferPool {
	return &bufferPool{minShift: minShift, tiers: make([]sync.Pool, maxShift-minShift+1)}
}

// tier is the index of the smallest tier whose buffers hold n bytes, or
// -1 when n is beyond the largest.
func (p *bufferPool) tier(n int) int {
	shift := p.minShift
	if n > 1 {
		shift = max(bits.Len(uint(n-1)), p.minShift)
	}
	if i := shift - p.minShift; i < len(p.tiers) {
		return i
	}
	return -1
}

// Get returns a buffer of length n whose contents are undefined.
func (p *bufferPool) Get(n int) *[]byte {
	i := p.tier(n)
	if i < 0 {
		b := make([]byte, n)
		return &b
	}
	if b, ok := p.tiers[i].Get().(*[]byte); ok {
		*b = (*b)[:n]
		return b
	}
	b := make([]byte, n, 1<<(p.minShift+i))
	return &b
}

// Put keeps b for a later Get if its capacity is one of the tiers'.
func (p *bufferPool) Put(b *[]byte) {
	c := cap(*b)
	if i := p.tier(c); i >= 0 && c == 1<<(p.minShift+i) {
		p.tiers[i].Put(b)
	}
}

// internalCodec is grpc-go's protobuf codec with internalBuffers in place
// of the default pool. It keeps the codec's name, so a peer sees the same
// content type ("application/grpc+proto").
type internalCodec struct{}

var _ encoding.CodecV2 = internalCodec{}

func (internalCodec) Name() string { return grpcproto.Name }

// Marshal follows grpc-go's codec: a small message gets a buffer of its
// own, a larger one a pooled buffer of its exact size.
func (internalCodec) Marshal(v any) (mem.BufferSlice, error) {
	m := messageOf(v)
	if m == nil {
		return nil, fmt.Errorf("proto: cannot marshal %T, want proto.Message", v)
	}
	size := proto.Size(m)
	// The size was just computed and the message is not changed while it
	// is sent, so the cached sizes are current.
	opts := proto.MarshalOptions{UseCachedSize: true}
	if mem.IsBelowBufferPoolingThreshold(size) {
		b, err := opts.Marshal(m)
		if err != nil {
			return nil, fmt.Errorf("proto: marshal %T: %w", v, err)
		}
		return mem.BufferSlice{mem.SliceBuffer(b)}, nil
	}
	buf := internalBuffers.Get(size)
	b, err := opts.MarshalAppend((*buf)[:0], m)
	if err != nil {
		internalBuffers.Put(buf)
		return nil, fmt.Errorf("proto: marshal %T: %w", v, err)
	}
	*buf = b
	return mem.BufferSlice{mem.NewBuffer(buf, internalBuffers)}, nil
}

// Unmarshal decodes a message that arrived in one frame in place, and
// one of several frames from one uncleared copy. proto.Unmarshal copies
// what it keeps, so the copy goes back to the pool at once.
func (internalCodec) Unmarshal(data mem.BufferSlice, v any) error {
	m := messageOf(v)
	if m == nil {
		return fmt.Errorf("proto: cannot unmarshal into %T, want proto.Message", v)
	}
	buf := data.MaterializeToBuffer(internalBuffers)
	defer buf.Free()
	if err := proto.Unmarshal(buf.ReadOnlyData(), m); err != nil {
		return fmt.Errorf("proto: unmarshal %T: %w", v, err)
	}
	return nil
}

// messageOf is v as a protobuf message, nil if it is none; messages of
// the first Go protobuf API are adapted, as grpc-go's codec does.
func messageOf(v any) proto.Message {
	switch v := v.(type) {
	case protoadapt.MessageV1:
		return protoadapt.MessageV2Of(v)
	case protoadapt.MessageV2:
		return v
	}
	return nil
}

// internalServerOptions and internalDialOptions put the codec and the
// pool on every internal connection, both ends. A peer outside the suite
// (a client with its own codec, grpc-gateway's proxy) is unaffected: the
// wire is the same protobuf.
func internalServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.ForceServerCodecV2(internalCodec{}),
		experimental.BufferPool(internalBuffers),
	}
}

func internalDialOptions() []grpc.DialOption {
	return []grpc.DialOption{
		grpc.WithDefaultCallOptions(grpc.ForceCodecV2(internalCodec{})),
		experimental.WithBufferPool(internalBuffers),
	}
}
