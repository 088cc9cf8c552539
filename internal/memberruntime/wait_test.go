package memberruntime

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

// listening keeps accepting on a loopback port until the test ends: a
// member process that never goes away.
func listening(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	return l.Addr().String()
}

// withStopWait shortens the stop wait's deadline and progress interval.
func withStopWait(t *testing.T, timeout, every time.Duration) {
	t.Helper()
	old := stopWait
	stopWait = waitLimits{timeout: timeout, every: every}
	t.Cleanup(func() { stopWait = old })
}

// stopWithin runs Stop with a context that has no deadline and fails the
// test if Stop has not returned within bound: the wait must end by itself.
func stopWithin(t *testing.T, rt Runtime, bound time.Duration) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- rt.Stop(context.Background()) }()
	select {
	case err := <-done:
		return err
	case <-time.After(bound):
		t.Fatalf("Stop still waiting after %s although its caller set no deadline: the wait has no deadline of its own", bound)
		return nil
	}
}

// Issue 10 item 8: the wait for the process to go has its own deadline and
// says that it waits, when it starts and while it lasts.
func TestStopWaitHasItsOwnDeadlineAndLogsWhileItLasts(t *testing.T) {
	withStopWait(t, 600*time.Millisecond, 150*time.Millisecond)
	core, logs := observer.New(zap.InfoLevel)
	rt := NewExec("true", "true", []string{"http://" + listening(t)}, "", zap.New(core))
	err := stopWithin(t, rt, 10*time.Second)
	if err == nil || !strings.Contains(err.Error(), "did not stop within") {
		t.Fatalf("Stop: got %v, want an error saying etcd did not stop within the wait's deadline", err)
	}
	if n := logs.FilterMessage("waiting for etcd to stop").Len(); n != 1 {
		t.Errorf("%d 'waiting for etcd to stop' lines, want 1 when the wait starts", n)
	}
	if n := logs.FilterMessage("still waiting for etcd to stop").Len(); n < 2 {
		t.Errorf("%d 'still waiting for etcd to stop' lines, want one every interval while it lasts", n)
	}
}

// dataDirFile puts a regular file where the data dir should be.
func dataDirFile(t *testing.T) string {
	t.Helper()
	file := filepath.Join(t.TempDir(), "etcd")
	if err := os.WriteFile(file, []byte("not a data dir"), 0o600); err != nil {
		t.Fatal(err)
	}
	return file
}

// Issue 38: a data dir replaced by a file has no db lock to look at; the
// listen URLs decide. Nothing listening: stopped, promptly, and the log
// says why. Still listening: the wait goes on to its deadline.
func TestStopWaitDecidesByTheURLsWhenTheDataDirIsNotADirectory(t *testing.T) {
	t.Run("nothing listens: stopped", func(t *testing.T) {
		withStopWait(t, time.Minute, time.Second)
		core, logs := observer.New(zap.InfoLevel)
		rt := NewExec("true", "true", []string{"http://" + closedAddr(t)}, dataDirFile(t), zap.New(core))
		if err := stopWithin(t, rt, 10*time.Second); err != nil {
			t.Fatalf("Stop: %v, want stopped: nothing listens on the member's URLs", err)
		}
		if n := logs.FilterMessageSnippet("the listen URLs decide").Len(); n != 1 {
			t.Errorf("%d log lines saying the listen URLs decide, want 1", n)
		}
	})
	t.Run("a URL still listens: waits to its deadline", func(t *testing.T) {
		withStopWait(t, 600*time.Millisecond, 150*time.Millisecond)
		rt := NewExec("true", "true", []string{"http://" + listening(t)}, dataDirFile(t), zap.NewNop())
		err := stopWithin(t, rt, 10*time.Second)
		if err == nil || !strings.Contains(err.Error(), "did not stop within") || !strings.Contains(err.Error(), "accepts connections") {
			t.Fatalf("Stop: got %v, want the deadline's error naming the URL that still accepts", err)
		}
	})
	t.Run("no URL to ask: an error at once", func(t *testing.T) {
		withStopWait(t, time.Minute, time.Second)
		rt := NewExec("true", "true", nil, dataDirFile(t), zap.NewNop())
		err := stopWithin(t, rt, 10*time.Second)
		if err == nil || !strings.Contains(err.Error(), "not a directory") {
			t.Fatalf("Stop: got %v, want an immediate error: neither a db lock nor a URL can tell", err)
		}
	})
}

// Issue 10 item 8: a client URL that cannot be probed is an error at once,
// not a member "maybe still there" until the deadline.
func TestStopWaitFailsAtOnceOnAnUnprobeableURL(t *testing.T) {
	withStopWait(t, time.Minute, time.Second)
	rt := NewExec("true", "true", []string{"ftp://127.0.0.1:1"}, "", zap.NewNop())
	err := stopWithin(t, rt, 10*time.Second)
	if err == nil || !strings.Contains(err.Error(), "unsupported scheme") {
		t.Fatalf("Stop: got %v, want an immediate error naming the URL it cannot probe", err)
	}
}
