package gate

import (
	"context"
	"testing"

	"go.uber.org/zap"
)

// A gate told a node name but given no way to the API cannot read the
// Node's pin: that is an error (the gate holds), never "no API here",
// which would let a pinned member on a reinstalled node bootstrap (review
// of the gate's own package, helper-33 #3).
func TestAGateWithANodeNameAndNoAPIClientCannotReadThePin(t *testing.T) {
	if _, err := gateNodePin(context.Background(), Config{NodeName: "node1"}, "m1", zap.NewNop()); err == nil {
		t.Fatal("no Kubernetes client, a node name: the pin was read as none")
	}
	if p, err := gateNodePin(context.Background(), Config{}, "m1", zap.NewNop()); err != nil || p.Seen() {
		t.Fatalf("no node name: no pin to read, got %v, %v", p, err)
	}
}
