package e2e

import (
	"context"
	"testing"
	"time"
)

// TestAnAnswerSentBeforeAKillIsNotServedAfterIt: the ID watch's answer to a
// Status request in flight when a test kills etcd was produced before the
// kill, though it arrives after it. CI saw "node2 served (old ID) 0s after its
// data dir was lost" from exactly that (stop 50's rehearsal): an answer
// counts as served no earlier than its request was sent.
func TestAnAnswerSentBeforeAKillIsNotServedAfterIt(t *testing.T) {
	w := &idWatch{}
	var killedAt time.Time
	w.probe(context.Background(), func(context.Context) (uint64, error) {
		// etcd has answered; the test kills it before the answer is read.
		time.Sleep(2 * time.Millisecond)
		killedAt = time.Now()
		time.Sleep(2 * time.Millisecond)
		return 0xad30b6db7ab22d99, nil
	})
	if got := w.since(killedAt); len(got) != 0 {
		t.Fatalf("an answer to a request sent before the kill counts as served after it: %+v", got)
	}
	sentAfter := time.Now()
	w.probe(context.Background(), func(context.Context) (uint64, error) { return 0x5f97ca68a7eba536, nil })
	if got := w.since(sentAfter); len(got) != 1 || got[0].id != 0x5f97ca68a7eba536 {
		t.Fatalf("an answer to a request sent after the kill is not counted: %+v", got)
	}
}
