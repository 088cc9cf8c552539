package nodereport_test

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/etcd-agent/etcd-agent/internal/nodereport"
)

func TestParseRequestAcceptsOnlyRejoinAndABooleanDryRun(t *testing.T) {
	const recover, dry = nodereport.AnnotationRecover, nodereport.AnnotationRecoverDryRun
	for _, tc := range []struct {
		name        string
		annotations map[string]string
		want        nodereport.Request
		wantOK      bool
		wantErr     string // part of the error message
	}{
		{name: "no annotations", annotations: nil},
		{name: "unrelated annotations", annotations: map[string]string{"other": "x"}},
		{name: "dry run alone is no request", annotations: map[string]string{dry: "true"}},
		{name: "rejoin", annotations: map[string]string{recover: "rejoin"},
			want: nodereport.Request{Action: "rejoin"}, wantOK: true},
		{name: "rejoin dry run", annotations: map[string]string{recover: "rejoin", dry: "true"},
			want: nodereport.Request{Action: "rejoin", DryRun: true}, wantOK: true},
		{name: "rejoin dry run false", annotations: map[string]string{recover: "rejoin", dry: "false"},
			want: nodereport.Request{Action: "rejoin"}, wantOK: true},
		{name: "unknown action", annotations: map[string]string{recover: "reboot"},
			want: nodereport.Request{Action: "reboot"}, wantOK: true, wantErr: `the accepted value is "rejoin"`},
		{name: "empty action", annotations: map[string]string{recover: ""},
			wantOK: true, wantErr: `the accepted value is "rejoin"`},
		{name: "action in capitals", annotations: map[string]string{recover: "Rejoin"},
			want: nodereport.Request{Action: "Rejoin"}, wantOK: true, wantErr: "not understood"},
		{name: "dry run yes", annotations: map[string]string{recover: "rejoin", dry: "yes"},
			want: nodereport.Request{Action: "rejoin"}, wantOK: true, wantErr: `accepted values are "true" and "false"`},
		{name: "dry run 1", annotations: map[string]string{recover: "rejoin", dry: "1"},
			want: nodereport.Request{Action: "rejoin"}, wantOK: true, wantErr: `accepted values are "true" and "false"`},
		{name: "move-in", annotations: map[string]string{recover: "move-in", nodereport.AnnotationMoveFrom: "cp-2/a1b2/x1"},
			want: nodereport.Request{Action: "move-in", From: "cp-2/a1b2/x1", Replaces: 0xa1b2}, wantOK: true},
		{name: "move-in without its ask", annotations: map[string]string{recover: "move-in", nodereport.AnnotationMoveFrom: "cp-2/a1b2"},
			want: nodereport.Request{Action: "move-in"}, wantOK: true, wantErr: "want <node>/<member ID in hex>/<ask>"},
		{name: "move-in without its source", annotations: map[string]string{recover: "move-in"},
			want: nodereport.Request{Action: "move-in"}, wantOK: true, wantErr: "want <node>/<member ID in hex>/<ask>"},
		{name: "move-in with a bad member ID", annotations: map[string]string{recover: "move-in", nodereport.AnnotationMoveFrom: "cp-2/zz/x1"},
			want: nodereport.Request{Action: "move-in"}, wantOK: true, wantErr: "want <node>/<member ID in hex>/<ask>"},
		{name: "move-in with member ID 0", annotations: map[string]string{recover: "move-in", nodereport.AnnotationMoveFrom: "cp-2/0/x1"},
			want: nodereport.Request{Action: "move-in"}, wantOK: true, wantErr: "want <node>/<member ID in hex>/<ask>"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok, err := nodereport.ParseRequest(tc.annotations)
			if got != tc.want || ok != tc.wantOK {
				t.Errorf("got %+v ok=%v, want %+v ok=%v", got, ok, tc.want, tc.wantOK)
			}
			switch {
			case tc.wantErr == "" && err != nil:
				t.Errorf("unexpected error %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Errorf("error %v, want one saying %q", err, tc.wantErr)
			}
		})
	}
}

// delivery is one onRequest call.
type delivery struct {
	req nodereport.Request
	err error
}

func TestWatchRequestsCallsBackForEachTriggerOnTheNode(t *testing.T) {
	kc := newClient(t)
	// A request made while the agent was down is delivered at start.
	node := newNode(t, kc, map[string]string{nodereport.AnnotationRecover: "rejoin"})
	got := make(chan delivery, 100)
	ctx, stop := context.WithCancel(context.Background())
	returned := make(chan error, 1)
	go func() {
		returned <- nodereport.WatchRequests(ctx, kc, node.Name, func(req nodereport.Request, err error) {
			got <- delivery{req, err}
		})
	}()
	t.Cleanup(func() {
		stop()
		select {
		case err := <-returned:
			if err != nil {
				t.Errorf("WatchRequests returned %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Error("WatchRequests did not return within 10 s of its context ending")
		}
	})
	r := nodereport.NewReporter(kc, node.Name, "etcd-agent-test", zaptest.NewLogger(t))
	t.Cleanup(r.Shutdown)
	expect := func(what string, want nodereport.Request, wantErr string) {
		t.Helper()
		select {
		case d := <-got:
			if d.req != want || (wantErr == "") != (d.err == nil) || (d.err != nil && !strings.Contains(d.err.Error(), wantErr)) {
				t.Fatalf("%s: got %+v err %v; want %+v err containing %q", what, d.req, d.err, want, wantErr)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: no callback within 10 s", what)
		}
	}
	expect("request pending at start", nodereport.Request{Action: "rejoin"}, "")

	if err := r.ClearRequest(ctx); err != nil {
		t.Fatal(err)
	}
	annotate(t, kc, node.Name, map[string]any{nodereport.AnnotationRecover: "reboot"})
	expect("value not understood", nodereport.Request{Action: "reboot"}, `accepted value is "rejoin"`)

	// Both annotations in one write, as the package doc tells operators.
	annotate(t, kc, node.Name, map[string]any{nodereport.AnnotationRecover: "rejoin", nodereport.AnnotationRecoverDryRun: "true"})
	expect("dry run", nodereport.Request{Action: "rejoin", DryRun: true}, "")

	if err := r.ClearRequest(ctx); err != nil {
		t.Fatal(err)
	}
	// Updates without a trigger (the clear, unrelated annotations) are not
	// requests; a duplicate delivery of an earlier resourceVersion would
	// show up before the next expected one.
	annotate(t, kc, node.Name, map[string]any{"example.com/unrelated": "1"})
	annotate(t, kc, node.Name, map[string]any{nodereport.AnnotationRecover: "rejoin"})
	expect("new request after clear", nodereport.Request{Action: "rejoin"}, "")
	if len(got) != 0 {
		t.Fatalf("unexpected extra callbacks: %d queued", len(got))
	}
}

func TestWatchRequestsRefusesAnEmptyNodeName(t *testing.T) {
	err := nodereport.WatchRequests(context.Background(), newClient(t), "", func(nodereport.Request, error) {})
	if err == nil {
		t.Fatal("WatchRequests accepted an empty node name")
	}
}

func TestClearRequestRemovesBothTriggerAnnotationsOnly(t *testing.T) {
	kc, ctx := newClient(t), ctxFor(t, 30*time.Second)
	node := newNode(t, kc, map[string]string{nodereport.AnnotationRecover: "rejoin",
		nodereport.AnnotationRecoverDryRun: "true", "example.com/keep": "me"})
	r := nodereport.NewReporter(kc, node.Name, "etcd-agent-test", zaptest.NewLogger(t))
	t.Cleanup(r.Shutdown)
	if err := r.ClearRequest(ctx); err != nil {
		t.Fatal(err)
	}
	after := getNode(t, kc, node.Name)
	for _, k := range []string{nodereport.AnnotationRecover, nodereport.AnnotationRecoverDryRun} {
		if v, ok := after.Annotations[k]; ok {
			t.Errorf("%s=%q still present", k, v)
		}
	}
	if after.Annotations["example.com/keep"] != "me" {
		t.Errorf("an unrelated annotation was removed: %v", after.Annotations)
	}
	// Nothing left to clear: no write at all.
	if err := r.ClearRequest(ctx); err != nil {
		t.Fatal(err)
	}
	if again := getNode(t, kc, node.Name); again.ResourceVersion != after.ResourceVersion {
		t.Errorf("a second ClearRequest wrote the node (resourceVersion %s -> %s)", after.ResourceVersion, again.ResourceVersion)
	}
}

func TestSetLastRecoveryWritesJSONThatRoundTrips(t *testing.T) {
	kc, ctx := newClient(t), ctxFor(t, 30*time.Second)
	node := newNode(t, kc, nil)
	r := nodereport.NewReporter(kc, node.Name, "etcd-agent-test", zaptest.NewLogger(t))
	t.Cleanup(r.Shutdown)
	want := nodereport.LastRecovery{Request: "rejoin (dry run)", Result: nodereport.ResultRefused,
		Reason: "quorum-at-risk", Phase: "plan", StartedAt: time.Date(2026, 3, 4, 5, 6, 7, 8000, time.UTC),
		FinishedAt: time.Date(2026, 3, 4, 5, 6, 9, 0, time.UTC), Message: `removing m2 would leave 1 of 3 voters; "fix" m3 first`}
	if err := r.SetLastRecovery(ctx, want); err != nil {
		t.Fatal(err)
	}
	raw := getNode(t, kc, node.Name).Annotations[nodereport.AnnotationLastRecovery]
	var fields map[string]any
	if err := json.Unmarshal([]byte(raw), &fields); err != nil {
		t.Fatalf("annotation is not JSON: %v\n%s", err, raw)
	}
	for _, k := range []string{"request", "result", "reason", "phase", "startedAt", "finishedAt"} {
		if _, ok := fields[k]; !ok {
			t.Errorf("field %q missing from %s", k, raw)
		}
	}
	got, ok, err := nodereport.LastRecoveryFrom(getNode(t, kc, node.Name).Annotations)
	if err != nil || !ok || !reflect.DeepEqual(got, want) {
		t.Fatalf("round trip: got %+v ok=%v err=%v, want %+v", got, ok, err, want)
	}
	if err := r.SetLastRecovery(ctx, nodereport.LastRecovery{Request: "rejoin", Result: "done"}); err == nil {
		t.Fatal("SetLastRecovery accepted result \"done\"")
	}
}

func TestSetStatusWritesTheStatusAnnotation(t *testing.T) {
	kc, ctx := newClient(t), ctxFor(t, 30*time.Second)
	node := newNode(t, kc, nil)
	r := nodereport.NewReporter(kc, node.Name, "etcd-agent-test", zaptest.NewLogger(t))
	t.Cleanup(r.Shutdown)
	if err := r.SetStatus(ctx, "healthy: member m1 voter, 3/3 serving"); err != nil {
		t.Fatal(err)
	}
	if got := getNode(t, kc, node.Name).Annotations[nodereport.AnnotationStatus]; got != "healthy: member m1 voter, 3/3 serving" {
		t.Fatalf("status annotation %q", got)
	}
}

var allReasons = []string{nodereport.ReasonMemberLost, nodereport.ReasonRecoveryStarted, nodereport.ReasonRecoveryRefused,
	nodereport.ReasonRecoverySucceeded, nodereport.ReasonRecoveryFailed, nodereport.ReasonSeedFallback, nodereport.ReasonLearnerRolledBack}

func recordAllReasons(r *nodereport.Reporter) {
	for _, reason := range allReasons {
		typ := corev1.EventTypeNormal
		if reason != nodereport.ReasonRecoveryStarted && reason != nodereport.ReasonRecoverySucceeded {
			typ = corev1.EventTypeWarning
		}
		r.Eventf(typ, reason, "member %s: %s", "m2", strings.ToLower(reason))
	}
}

func TestEventsWithTheRecoveryReasonsAppearOnTheNode(t *testing.T) {
	kc := newClient(t)
	node := newNode(t, kc, nil)
	r := nodereport.NewReporter(kc, node.Name, "etcd-agent-test", zaptest.NewLogger(t))
	t.Cleanup(r.Shutdown)
	recordAllReasons(r)
	var events []corev1.Event
	eventually(t, 15*time.Second, "events on the node", func() error {
		events = nodeEvents(t, kc, node.Name)
		return missingReasons(events)
	})
	for _, e := range events {
		if e.InvolvedObject.Kind != "Node" || e.InvolvedObject.UID != node.UID {
			t.Errorf("event %s involves %+v, want Node %s uid %s", e.Reason, e.InvolvedObject, node.Name, node.UID)
		}
		if e.Source.Component != "etcd-agent-test" || e.Source.Host != node.Name {
			t.Errorf("event %s source %+v", e.Reason, e.Source)
		}
		wantType := corev1.EventTypeWarning
		if e.Reason == nodereport.ReasonRecoveryStarted || e.Reason == nodereport.ReasonRecoverySucceeded {
			wantType = corev1.EventTypeNormal
		}
		if e.Type != wantType || e.Message != "member m2: "+strings.ToLower(e.Reason) {
			t.Errorf("event %s: type %s message %q", e.Reason, e.Type, e.Message)
		}
	}
}

func TestShutdownDeliversEventsRecordedJustBefore(t *testing.T) {
	kc := newClient(t)
	node := newNode(t, kc, nil)
	r := nodereport.NewReporter(kc, node.Name, "etcd-agent-test", zaptest.NewLogger(t))
	recordAllReasons(r)
	r.Shutdown()
	if err := missingReasons(nodeEvents(t, kc, node.Name)); err != nil {
		t.Fatalf("right after Shutdown: %v", err)
	}
	// A second Shutdown and a late Event are harmless: the Event is dropped.
	r.Shutdown()
	r.Eventf(corev1.EventTypeNormal, nodereport.ReasonRecoveryStarted, "after shutdown")
}

func TestEventsUseTheNodeNameAsUIDWhenTheNodeCannotBeRead(t *testing.T) {
	kc := newClient(t)
	name := fmt.Sprintf("nodereport-missing-%d", time.Now().UnixNano())
	r := nodereport.NewReporter(kc, name, "etcd-agent-test", zaptest.NewLogger(t))
	r.Eventf(corev1.EventTypeWarning, nodereport.ReasonMemberLost, "member m2 lost")
	r.Shutdown()
	events := nodeEvents(t, kc, name)
	if len(events) != 1 || events[0].InvolvedObject.UID != types.UID(name) {
		t.Fatalf("events %+v; want one with UID %q, the kubelet's convention `kubectl describe node` finds", events, name)
	}
}

func missingReasons(events []corev1.Event) error {
	var missing []string
	for _, want := range allReasons {
		if !slices.ContainsFunc(events, func(e corev1.Event) bool { return e.Reason == want }) {
			missing = append(missing, want)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("missing %v among %d events", missing, len(events))
	}
	return nil
}

func nodeEvents(t *testing.T, kc kubernetes.Interface, node string) []corev1.Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	list, err := kc.CoreV1().Events("").List(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("involvedObject.name", node).String()})
	if err != nil {
		t.Fatal(err)
	}
	return list.Items
}

// annotate merge-patches the node's annotations the way
// `kubectl annotate --overwrite` does.
func annotate(t *testing.T, kc kubernetes.Interface, node string, annotations map[string]any) {
	t.Helper()
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": annotations}})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := kc.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
}

func getNode(t *testing.T, kc kubernetes.Interface, name string) *corev1.Node {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	n, err := kc.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return n
}
