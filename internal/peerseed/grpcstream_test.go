package peerseed

import (
	"bytes"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
)

// split cuts b into buffers of at most n bytes, as gRPC hands over a
// message that spans several HTTP/2 frames.
func split(b []byte, n int) mem.BufferSlice {
	var s mem.BufferSlice
	for len(b) > 0 {
		k := min(n, len(b))
		s = append(s, mem.SliceBuffer(append([]byte(nil), b[:k]...)))
		b = b[k:]
	}
	return s
}

func TestTheChunkCodecDecodesWhatGRPCsCodecDoesAndKeepsNothingOfItsBuffer(t *testing.T) {
	c := chunkCodec{proto: encoding.GetCodecV2("proto")}
	chunk := func(fill byte) []byte {
		msg := &pb.SnapshotResponse{RemainingBytes: 7, Blob: bytes.Repeat([]byte{fill}, 32<<10), Version: "3.6.0"}
		data, err := c.Marshal(msg)
		if err != nil {
			t.Fatal(err)
		}
		return data.Materialize()
	}
	a, b := chunk('a'), chunk('b')
	var first, second, whole pb.SnapshotResponse
	if err := c.Unmarshal(split(a, 16<<10), &first); err != nil {
		t.Fatal(err)
	}
	// The join buffer is reused for the next message: the first must not
	// have kept a view of it.
	if err := c.Unmarshal(split(b, 16<<10), &second); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(first.Blob, bytes.Repeat([]byte{'a'}, 32<<10)) || first.RemainingBytes != 7 || first.Version != "3.6.0" {
		t.Fatalf("the first chunk changed after the next was decoded: %q... (%d bytes)", first.Blob[:8], len(first.Blob))
	}
	if !bytes.Equal(second.Blob, bytes.Repeat([]byte{'b'}, 32<<10)) {
		t.Fatal("the second chunk was decoded wrong")
	}
	if err := c.Unmarshal(split(a, len(a)), &whole); err != nil || !bytes.Equal(whole.Blob, first.Blob) {
		t.Fatalf("a message in one buffer: %v", err)
	}
	if err := c.Unmarshal(split(a, 16<<10), struct{}{}); err == nil {
		t.Fatal("a value that is no proto message was decoded")
	}
	if c.Name() != "proto" {
		t.Fatalf("name %q: the codec must replace gRPC's proto codec on the wire", c.Name())
	}
}
