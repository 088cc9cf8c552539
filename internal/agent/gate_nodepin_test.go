package agent

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/gate"
	"github.com/etcd-agent/etcd-agent/internal/nodereport"
	"github.com/etcd-agent/etcd-agent/internal/pin"
	"github.com/etcd-agent/etcd-agent/internal/plan"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// nodeAPI is an API server that answers GET of Node node1 with an error
// (500) the first fails times, then with the Node (annotated with pins,
// when set) or, without a Node, 404. gets counts the Node's reads, at
// (read once the gate returned) says when each came.
func nodeAPI(t *testing.T, fails int32, node *corev1.Node) (kubeconfig string, gets *atomic.Int32, at *[]time.Time) {
	t.Helper()
	gets, at = &atomic.Int32{}, &[]time.Time{}
	var mu sync.Mutex
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/api/v1/nodes/node1" {
			http.NotFound(w, r)
			return
		}
		mu.Lock()
		*at = append(*at, time.Now())
		mu.Unlock()
		n := gets.Add(1)
		w.Header().Set("Content-Type", "application/json")
		status := metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}, Status: metav1.StatusFailure}
		switch {
		case n <= fails:
			status.Code, status.Reason, status.Message = 500, metav1.StatusReasonInternalError, "etcdserver: request timed out"
		case node == nil:
			status.Code, status.Reason, status.Message = 404, metav1.StatusReasonNotFound, `nodes "node1" not found`
		default:
			_ = json.NewEncoder(w).Encode(node)
			return
		}
		w.WriteHeader(int(status.Code))
		_ = json.NewEncoder(w).Encode(status)
	}))
	t.Cleanup(srv.Close)
	kubeconfig = filepath.Join(t.TempDir(), "kubeconfig")
	cfg := `apiVersion: v1
kind: Config
clusters: [{name: lab, cluster: {server: "` + srv.URL + `"}}]
users: [{name: gate, user: {}}]
contexts: [{name: lab, context: {cluster: lab, user: gate}}]
current-context: lab
`
	if err := os.WriteFile(kubeconfig, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return kubeconfig, gets, at
}

// Issue 38: a state dir without a pin (a reinstalled node) asks the Node
// whether the member has served. The gate read the Node once per process
// and took an API error for "no pin": a member the Node says has served
// could bootstrap a fresh cluster under its old IDs. While the Node cannot
// be read the gate holds (pin-unreadable) and asks again, with backoff;
// once read, it judges by the pin it read (and asks no more).
func TestTheGateHoldsWhileTheNodesPinCannotBeReadAndAsksAgain(t *testing.T) {
	seen := pin.Pin{Member: "etcd-1", ClusterID: 0xc1, MemberID: 0xe1, FirstSeenAt: time.Now(), SeenAt: time.Now()}
	pins, err := pin.EncodeWith(map[string]pin.Pin{}, seen)
	if err != nil {
		t.Fatal(err)
	}
	pinnedNode := &corev1.Node{TypeMeta: metav1.TypeMeta{Kind: "Node", APIVersion: "v1"},
		ObjectMeta: metav1.ObjectMeta{Name: "node1", Annotations: map[string]string{nodereport.AnnotationPins: pins}}}
	for _, c := range []struct {
		name     string
		node     *corev1.Node
		wantPass bool
		want     plan.Reason
	}{
		// The Node says it served: never seen, it would bootstrap.
		{"the Node pins the member", pinnedNode, false, plan.GateClusterUnknown},
		// No record at all: a member never seen may bootstrap.
		{"no such Node", nil, true, plan.GateNeverSeen},
	} {
		t.Run(c.name, func(t *testing.T) {
			const fails = 3
			kubeconfig, gets, at := nodeAPI(t, fails, c.node)
			core, logs := observer.New(zapcore.InfoLevel)
			state, data := t.TempDir(), t.TempDir()+"/member"
			peer := closedEndpoint(t)
			argv := []string{"/bin/etcd", "--name=etcd-1", "--data-dir=" + data,
				"--initial-advertise-peer-urls=" + peer, "--advertise-client-urls=" + closedEndpoint(t),
				"--initial-cluster=etcd-1=" + peer, "--initial-cluster-state=new"}
			c2 := Config{StateDir: state, NodeName: "node1", Kubeconfig: kubeconfig, Endpoints: []string{closedEndpoint(t)},
				PollInterval: 20 * time.Millisecond, Log: zap.New(core)}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			v, err := gate.Wait(ctx, c2.GateConfig(), 2*time.Second, argv)
			if c.wantPass {
				if err != nil || v.Reason != c.want {
					t.Fatalf("gate: %+v, %v; want a pass (%s)", v, err, c.want)
				}
			} else if err == nil || !strings.Contains(err.Error(), string(c.want)) {
				t.Fatalf("gate: %+v, %v; want it held (%s)", v, err, c.want)
			}
			if n := gets.Load(); n != fails+1 {
				t.Errorf("the Node was read %d times, want %d: asked again after each failure, not after a read", n, fails+1)
			} else if gap := (*at)[fails].Sub((*at)[fails-1]); gap < 4*c2.PollInterval {
				// Backoff from the poll interval, doubling: the third
				// failure waits 4 polls at least.
				t.Errorf("asked again %s after the third failure, want >= %s (backoff)", gap, 4*c2.PollInterval)
			}
			holds := logs.FilterMessage("start gate holds etcd back").FilterField(zap.String("reason", string(plan.GatePinUnreadable)))
			if holds.Len() == 0 {
				t.Error("the gate never held (pin-unreadable) while the Node could not be read")
			}
			if n := logs.FilterMessageSnippet("the Node's pin cannot be read").Len(); n != fails {
				t.Errorf("%d failed reads logged, want %d", n, fails)
			}
		})
	}
}

// No Kubernetes API configured (no kubeconfig, not in a cluster): only the
// state dir counts, and a member never seen may bootstrap.
func TestTheGateWithoutAKubernetesAPIJudgesByTheStateDirAlone(t *testing.T) {
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	t.Setenv("KUBERNETES_SERVICE_PORT", "")
	state, data := t.TempDir(), t.TempDir()+"/member"
	peer := closedEndpoint(t)
	argv := []string{"/bin/etcd", "--name=etcd-1", "--data-dir=" + data,
		"--initial-advertise-peer-urls=" + peer, "--advertise-client-urls=" + closedEndpoint(t),
		"--initial-cluster=etcd-1=" + peer, "--initial-cluster-state=new"}
	c := Config{StateDir: state, NodeName: "node1", Endpoints: []string{closedEndpoint(t)},
		PollInterval: 20 * time.Millisecond, Log: zap.NewNop()}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if v, err := gate.Wait(ctx, c.GateConfig(), 2*time.Second, argv); err != nil || v.Reason != plan.GateNeverSeen {
		t.Fatalf("gate: %+v, %v; want a pass (%s)", v, err, plan.GateNeverSeen)
	}
}
