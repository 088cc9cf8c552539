package memberruntime

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/plan"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
	"k8s.io/apimachinery/pkg/types"
)

type deleterFunc func(ctx context.Context) error

func (f deleterFunc) DeletePod(ctx context.Context) (types.UID, error) { return "u1", f(ctx) }

// PodGone: gone at once (the API's answer is the deleter's to give).
func (f deleterFunc) PodGone(context.Context, types.UID) (bool, error) { return true, nil }

// slowDeleter's pod leaves the API only after gone has been asked n times.
type slowDeleter struct{ asked, n int }

func (d *slowDeleter) DeletePod(context.Context) (types.UID, error) { return "u1", nil }
func (d *slowDeleter) PodGone(_ context.Context, uid types.UID) (bool, error) {
	d.asked++
	return uid == "u1" && d.asked > d.n, nil
}

// From the review: "gone" is the API's word (a deleted pod's IP times out
// rather than refusing on a real network), not a dial of its URLs.
func TestPodStopWaitsForTheAPIToLetThePodGo(t *testing.T) {
	dir := t.TempDir()
	d := &slowDeleter{n: 5}
	rt := NewPod("ns/etcd-0", d, dir, func() error { return nil }, []string{"http://192.0.2.1:2379"}, filepath.Join(dir, "data"), nil, StopTimeout(10*time.Second))
	if err := rt.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	if d.asked <= d.n {
		t.Fatalf("Stop returned after %d looks; the pod left the API after %d", d.asked, d.n+1)
	}
	never := &slowDeleter{n: 1 << 30}
	rt = NewPod("ns/etcd-0", never, t.TempDir(), func() error { return nil }, nil, "", nil, StopTimeout(time.Second))
	if err := rt.Stop(context.Background()); err == nil {
		t.Fatal("a pod the API keeps must make Stop fail at its deadline")
	}
}

// nobody listens on port 1 of loopback: a stopped member.
var goneURLs = []string{"http://127.0.0.1:1"}

func TestPodStopHoldsTheGateBeforeDeletingThePod(t *testing.T) {
	dir := t.TempDir()
	deletes := 0
	d := deleterFunc(func(context.Context) error {
		deletes++
		if _, held, err := ReadHold(dir); err != nil || !held {
			t.Errorf("the pod was deleted before the gate was held (held=%v err=%v): its re-created pod could start etcd", held, err)
		}
		return nil
	})
	rt := NewPod("ns/etcd-0", d, dir, func() error { return nil }, goneURLs, filepath.Join(dir, "data"), nil, StopTimeout(10*time.Second))
	if err := rt.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	if stopped, err := rt.Stopped(); err != nil || !stopped || deletes != 1 {
		t.Fatalf("stopped=%v err=%v deletes=%d", stopped, err, deletes)
	}
	if err := rt.Start(context.Background(), "etcd-0=http://a:2380,etcd-1=http://b:2380"); err != nil {
		t.Fatal(err)
	}
	if stopped, _ := rt.Stopped(); stopped {
		t.Fatal("still held after Start")
	}
	sf, ok, err := ReadStartFlags(dir)
	if err != nil || !ok || sf.InitialCluster != "etcd-0=http://a:2380,etcd-1=http://b:2380" || sf.InitialClusterState != "existing" {
		t.Fatalf("start flags %+v %v %v", sf, ok, err)
	}
}

func TestPodStopRefusesAPodWithoutTheGate(t *testing.T) {
	dir := t.TempDir()
	d := deleterFunc(func(context.Context) error { t.Error("deleted a pod whose etcd is not behind the gate"); return nil })
	rt := NewPod("ns/etcd-0", d, dir, func() error { return errors.New("not gate-wrapped") }, goneURLs, "", nil)
	if err := rt.Stop(context.Background()); err == nil {
		t.Fatal("Stop must refuse")
	}
	if _, held, _ := ReadHold(dir); held {
		t.Fatal("a refused Stop left a hold")
	}
}

func TestPodStopKeepsTheHoldWhenTheDeleteFails(t *testing.T) {
	dir := t.TempDir()
	rt := NewPod("ns/etcd-0", deleterFunc(func(context.Context) error { return errors.New("api down") }), dir, func() error { return nil }, goneURLs, "", nil)
	if err := rt.Stop(context.Background()); err == nil {
		t.Fatal("Stop must fail when the pod cannot be deleted")
	}
	// The hold stays: the member may be restarted by its kubelet at any
	// time, and the rejoin that wanted it stopped is not over.
	if stopped, _ := rt.Stopped(); !stopped {
		t.Fatal("hold removed")
	}
}

func TestAnUnreadableHoldCountsAsHeld(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, HoldFile), []byte("{not json"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, held, err := ReadHold(dir); !held || err == nil {
		t.Fatalf("held=%v err=%v", held, err)
	}
	if err := os.WriteFile(filepath.Join(dir, StartFile), []byte(`{"initialCluster":"a=http://x:2380"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := ReadStartFlags(dir); ok || err == nil {
		t.Fatalf("an incomplete start file was accepted: %v %v", ok, err)
	}
}

// From the review: the deleter may refuse the pod it read (it keeps its data
// elsewhere now) after Stop wrote the hold; nothing was deleted, so the hold
// this call wrote goes again (the running pod would otherwise be held at its
// next restart), and the refusal keeps its reason for the executor. A hold
// that was there before the call stays.
func TestPodStopRemovesItsHoldWhenTheDeleterRefuses(t *testing.T) {
	refusal := plan.Refused(plan.ReasonMemberDataMoved, errors.New("the pod now keeps its data elsewhere"))
	dir := t.TempDir()
	rt := NewPod("ns/etcd-0", deleterFunc(func(context.Context) error { return refusal }), dir, func() error { return nil }, goneURLs, "", nil)
	err := rt.Stop(context.Background())
	if r, ok := plan.RefusalOf(err); !ok || r.Reason != plan.ReasonMemberDataMoved {
		t.Fatalf("Stop: %v, want the deleter's refusal", err)
	}
	if _, held, _ := ReadHold(dir); held {
		t.Fatal("a refused delete left this call's hold")
	}
	// A hold from before (an earlier stop of this attempt) is not this call's.
	if err := os.WriteFile(filepath.Join(dir, HoldFile), []byte(`{"reason":"earlier"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := rt.Stop(context.Background()); err == nil {
		t.Fatal("Stop must fail")
	}
	if _, held, _ := ReadHold(dir); !held {
		t.Fatal("an earlier hold was removed")
	}
}

// Issue 38: a data dir replaced by a file has no db lock to look at; the
// API's word that the pod is gone (its kubelet confirmed the end of its
// containers) decides, and the log says so.
func TestPodStopWithADataDirThatIsNotADirectoryTakesTheAPIsWord(t *testing.T) {
	dir := t.TempDir()
	core, logs := observer.New(zap.InfoLevel)
	rt := NewPod("ns/etcd-0", deleterFunc(func(context.Context) error { return nil }), dir, func() error { return nil }, nil, dataDirFile(t),
		zap.New(core), StopTimeout(10*time.Second))
	if err := stopWithin(t, rt, 10*time.Second); err != nil {
		t.Fatalf("Stop: %v, want stopped: the API says the pod is gone", err)
	}
	if n := logs.FilterMessageSnippet("the API's word that the pod is gone decides").Len(); n != 1 {
		t.Errorf("%d log lines saying the API decides, want 1", n)
	}
}
