package lab

import (
	"bytes"
	"context"
	"errors"
	"io"
	"testing"
)

type countingWaiter struct {
	asked []int
	err   error
}

func (w *countingWaiter) WaitN(_ context.Context, n int) error {
	w.asked = append(w.asked, n)
	return w.err
}

// Every byte a metered body hands on was let through by the limiter first,
// never more than linkBurst at once (a limiter refuses a WaitN above its
// burst), and the body arrives whole.
func TestAMeteredBodyAsksTheLimiterForEveryByte(t *testing.T) {
	in := bytes.Repeat([]byte("x"), 3*linkBurst+123)
	w := &countingWaiter{}
	out, err := io.ReadAll(meteredBody{ReadCloser: io.NopCloser(bytes.NewReader(in)), ctx: context.Background(), lim: w})
	if err != nil || !bytes.Equal(out, in) {
		t.Fatalf("read %d bytes, err %v; want the %d sent", len(out), err, len(in))
	}
	total := 0
	for _, n := range w.asked {
		if n > linkBurst {
			t.Errorf("asked the limiter for %d bytes at once, above its burst %d", n, linkBurst)
		}
		total += n
	}
	if total != len(in) {
		t.Errorf("the limiter let through %d bytes, the body handed on %d", total, len(in))
	}
}

// A limiter that gives up (the request cancelled) ends the body with its
// error.
func TestAMeteredBodyStopsWhenTheLimiterGivesUp(t *testing.T) {
	cut := errors.New("request cancelled")
	_, err := io.ReadAll(meteredBody{ReadCloser: io.NopCloser(bytes.NewReader([]byte("abc"))), ctx: context.Background(), lim: &countingWaiter{err: cut}})
	if !errors.Is(err, cut) {
		t.Fatalf("read error %v, want the limiter's %v", err, cut)
	}
}
