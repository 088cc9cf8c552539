// Package invariant checks, around a lab scenario, what a heal must never
// break: every acknowledged write (through the API and straight to etcd) is
// still readable afterwards, quorum is never lost for more than a moment,
// voting members agree on HashKV, and there is never more than one learner.
// The demo uses the same writer to report API writes attempted and failed.
package invariant

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// WriterNamespace holds the writer's ConfigMaps.
const WriterNamespace = "lab-writer"

// Failure is one write that was not acknowledged.
type Failure struct {
	At  time.Time `json:"at"`
	Via string    `json:"via"` // "api" or "etcd"
	Err string    `json:"err"`
}

// WriterReport counts the writes of one run.
type WriterReport struct {
	APIAttempted, APIFailed   int
	EtcdAttempted, EtcdFailed int
	APILatencies              []time.Duration
	Failures                  []Failure
	apiAcked, etcdAcked       []int
}

// Writer writes numbered ConfigMaps through the API and numbered keys
// straight to etcd, one of each per interval, and logs every acknowledged one.
type Writer struct {
	kc     kubernetes.Interface
	etcd   *clientv3.Client
	run    string
	cancel context.CancelFunc
	done   chan struct{}
	mu     sync.Mutex
	rep    WriterReport
}

// StartWriter starts writing every interval until Stop. kc may be nil (no
// API writes), etcd may be nil (no direct writes).
func StartWriter(ctx context.Context, kc kubernetes.Interface, etcd *clientv3.Client, interval time.Duration) (*Writer, error) {
	run := strconv.FormatInt(time.Now().UnixNano()%1e9, 36)
	if kc != nil {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: WriterNamespace}}
		if _, err := kc.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return nil, fmt.Errorf("create namespace %s: %w", WriterNamespace, err)
		}
	}
	wctx, cancel := context.WithCancel(ctx)
	w := &Writer{kc: kc, etcd: etcd, run: run, cancel: cancel, done: make(chan struct{})}
	go w.loop(wctx, interval)
	return w, nil
}

func (w *Writer) cmName(i int) string  { return fmt.Sprintf("w-%s-%06d", w.run, i) }
func (w *Writer) etcdKey(i int) string { return fmt.Sprintf("/lab-writer/%s/%06d", w.run, i) }

func (w *Writer) loop(ctx context.Context, interval time.Duration) {
	defer close(w.done)
	t := time.NewTicker(interval)
	defer t.Stop()
	for i := 0; ; i++ {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		var wg sync.WaitGroup
		if w.kc != nil {
			wg.Add(1)
			go func() { defer wg.Done(); w.writeAPI(ctx, i) }()
		}
		if w.etcd != nil {
			wg.Add(1)
			go func() { defer wg.Done(); w.writeEtcd(ctx, i) }()
		}
		wg.Wait()
	}
}

func (w *Writer) writeAPI(ctx context.Context, i int) {
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: w.cmName(i)}, Data: map[string]string{"n": strconv.Itoa(i)}}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 15*time.Second)
	defer cancel()
	start := time.Now()
	_, err := w.kc.CoreV1().ConfigMaps(WriterNamespace).Create(rctx, cm, metav1.CreateOptions{})
	lat := time.Since(start)
	w.mu.Lock()
	defer w.mu.Unlock()
	w.rep.APIAttempted++
	if err != nil {
		w.rep.APIFailed++
		w.rep.Failures = append(w.rep.Failures, Failure{At: start, Via: "api", Err: err.Error()})
		return
	}
	w.rep.APILatencies = append(w.rep.APILatencies, lat)
	w.rep.apiAcked = append(w.rep.apiAcked, i)
}

func (w *Writer) writeEtcd(ctx context.Context, i int) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	start := time.Now()
	_, err := w.etcd.Put(rctx, w.etcdKey(i), strconv.Itoa(i))
	w.mu.Lock()
	defer w.mu.Unlock()
	w.rep.EtcdAttempted++
	if err != nil {
		w.rep.EtcdFailed++
		w.rep.Failures = append(w.rep.Failures, Failure{At: start, Via: "etcd", Err: err.Error()})
		return
	}
	w.rep.etcdAcked = append(w.rep.etcdAcked, i)
}

// Stop ends the writes (waiting for the ones in flight) and returns the report.
func (w *Writer) Stop() WriterReport {
	w.cancel()
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.rep
}

// Snapshot returns the report so far without stopping.
func (w *Writer) Snapshot() WriterReport {
	w.mu.Lock()
	defer w.mu.Unlock()
	r := w.rep
	r.APILatencies = append([]time.Duration(nil), w.rep.APILatencies...)
	return r
}

// VerifyAcked reads back every acknowledged write; an acknowledged write that
// is missing or wrong is data loss.
func (w *Writer) VerifyAcked(ctx context.Context, rep WriterReport) error {
	if w.kc != nil && len(rep.apiAcked) > 0 {
		list, err := w.kc.CoreV1().ConfigMaps(WriterNamespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			return fmt.Errorf("list writer ConfigMaps: %w", err)
		}
		have := map[string]string{}
		for _, cm := range list.Items {
			have[cm.Name] = cm.Data["n"]
		}
		var lost []string
		for _, i := range rep.apiAcked {
			if have[w.cmName(i)] != strconv.Itoa(i) {
				lost = append(lost, w.cmName(i))
			}
		}
		if len(lost) > 0 {
			return fmt.Errorf("%d acknowledged API writes lost, e.g. %v", len(lost), lost[:min(5, len(lost))])
		}
	}
	if w.etcd != nil && len(rep.etcdAcked) > 0 {
		resp, err := w.etcd.Get(ctx, fmt.Sprintf("/lab-writer/%s/", w.run), clientv3.WithPrefix())
		if err != nil {
			return fmt.Errorf("read writer keys: %w", err)
		}
		have := map[string]string{}
		for _, kv := range resp.Kvs {
			have[string(kv.Key)] = string(kv.Value)
		}
		var lost []string
		for _, i := range rep.etcdAcked {
			if have[w.etcdKey(i)] != strconv.Itoa(i) {
				lost = append(lost, w.etcdKey(i))
			}
		}
		if len(lost) > 0 {
			return fmt.Errorf("%d acknowledged etcd writes lost, e.g. %v", len(lost), lost[:min(5, len(lost))])
		}
	}
	return nil
}

// Percentile returns the p-th percentile (0-100) of ds, 0 for none.
func Percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	idx := int(float64(len(s)-1) * p / 100)
	return s[idx]
}
