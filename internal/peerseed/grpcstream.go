package peerseed

import (
	"fmt"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/protoadapt"
)

// streamDial is how Stream's client dials: tuned for one long stream of
// 32 KiB messages (etcd's snapshot chunks). Measured on the project machine
// (a 730 MB db from a follower, BenchmarkStream's sub-benchmarks compare):
// with gRPC's defaults the client spent ~3 CPU-seconds and the stream ran at
// 180-210 MB/s, CPU-bound on 2 cores with etcd's own ~3 s; tuned, ~2.1 s and
// 260-275 MB/s. Under a heal's load (the API, the members) the CPU the
// client does not take is the stream's to use.
var streamDial = []grpc.DialOption{
	// Static windows larger than a stream's burst: no BDP probing and far
	// fewer WINDOW_UPDATE frames than the default 64 KiB start.
	grpc.WithInitialWindowSize(8 << 20),
	grpc.WithInitialConnWindowSize(16 << 20),
	grpc.WithDefaultCallOptions(grpc.ForceCodecV2(chunkCodec{proto: encoding.GetCodecV2("proto")})),
}

// chunkCodec is gRPC's proto codec but for where a message that arrived
// in several buffers is joined before it is decoded. gRPC joins it in a
// buffer of its default pool, whose tier above 32 KiB is 1 MiB and is
// zeroed whole on every Get: for each 32 KiB snapshot chunk (a little more
// with its framing), 1 MiB cleared, a third of the client's CPU in the
// profile. Here the join takes a reused buffer as large as the message,
// not zeroed: it is overwritten whole by the copy, and proto.Unmarshal
// copies the bytes it keeps (the chunk's Blob) out of it, as gRPC's own
// codec relies on when it frees its buffer after Unmarshal.
type chunkCodec struct{ proto encoding.CodecV2 }

var joinBuffers = sync.Pool{New: func() any { b := make([]byte, 0, 64<<10); return &b }}

func (c chunkCodec) Name() string { return c.proto.Name() }

func (c chunkCodec) Marshal(v any) (mem.BufferSlice, error) { return c.proto.Marshal(v) }

func (c chunkCodec) Unmarshal(data mem.BufferSlice, v any) error {
	var m proto.Message
	switch x := v.(type) {
	case protoadapt.MessageV2:
		m = x
	case protoadapt.MessageV1:
		m = protoadapt.MessageV2Of(x)
	default:
		return fmt.Errorf("failed to unmarshal, message is %T, want proto.Message", v)
	}
	if len(data) == 1 {
		return proto.Unmarshal(data[0].ReadOnlyData(), m)
	}
	bp := joinBuffers.Get().(*[]byte)
	defer joinBuffers.Put(bp)
	n := data.Len()
	if cap(*bp) < n {
		*bp = make([]byte, n)
	}
	b := (*bp)[:n]
	data.CopyTo(b)
	return proto.Unmarshal(b, m)
}
