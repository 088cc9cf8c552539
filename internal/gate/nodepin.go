package gate

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/nodereport"
	"github.com/etcd-agent/etcd-agent/internal/pin"
	"go.uber.org/zap"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// nodePinRetryCap bounds the wait between two reads of a Node that did not
// answer: the gate holds meanwhile, so it must not wait long once the API
// is back.
const nodePinRetryCap = 30 * time.Second

// nodePinReader is the start gate's reader of what the Node says the agent
// has seen of member, for a state dir without a pin (a reinstalled node).
// A Node read, or known to have no pin, is kept for the process. A read
// that fails is never "no pin" ("unknown" is never "never seen": the gate
// holds on it) and is asked again, at the first look after a backoff that
// starts at the poll interval, doubles and is capped.
type nodePinReader struct {
	c      Config
	member string
	log    *zap.Logger

	done    bool // read: pin is the Node's answer
	pin     pin.Pin
	err     error     // the last failed read's
	next    time.Time // no read before (after a failure)
	fails   int
	backoff wait.Backoff
}

func newNodePinReader(c Config, member string, log *zap.Logger) *nodePinReader {
	return &nodePinReader{c: c, member: member, log: log,
		backoff: wait.Backoff{Duration: c.PollInterval, Factor: 2, Jitter: 0.1, Steps: math.MaxInt32, Cap: nodePinRetryCap}}
}

// read is the Node's pin of the member (zero: none), or why it cannot be
// read now (the last failure's error until the backoff has passed).
func (r *nodePinReader) read(ctx context.Context, now time.Time) (pin.Pin, error) {
	if r.done {
		return r.pin, nil
	}
	if r.err != nil && now.Before(r.next) {
		return pin.Pin{}, r.err
	}
	asked := time.Now()
	p, err := gateNodePin(ctx, r.c, r.member, r.log)
	if err != nil {
		r.fails++
		delay := r.backoff.Step()
		// From the failure, not from the look: a slow answer must not eat
		// the backoff (seen under load: the fourth read 64 ms after the
		// third, not the 80 ms the backoff said).
		r.err, r.next = err, now.Add(time.Since(asked)+delay)
		r.log.Warn("start gate: the Node's pin cannot be read; etcd is held until it is (a member it pins must not bootstrap)",
			zap.Error(err), zap.Int("failedReads", r.fails), zap.Duration("askAgainIn", delay.Round(time.Millisecond)))
		return pin.Pin{}, err
	}
	if r.fails > 0 {
		r.log.Info("start gate: the Node's pin read", zap.Int("afterFailedReads", r.fails))
	}
	r.done, r.pin, r.err = true, p, nil
	return p, nil
}

// gateNodePin is what the Node says the agent has seen of member. No
// Kubernetes API configured (no --node-name, no kubeconfig and not in a
// cluster) and no such Node mean no pin: only the state dir is known. Any
// other failure, a malformed record included, is an error.
func gateNodePin(ctx context.Context, c Config, member string, log *zap.Logger) (pin.Pin, error) {
	if c.NodeName == "" {
		return pin.Pin{}, nil
	}
	kc, err := c.kubeClient()
	if err != nil {
		if c.Kubeconfig == "" && errors.Is(err, rest.ErrNotInCluster) {
			log.Info("start gate: no Kubernetes API to read the Node's pin; only the state dir's counts", zap.Error(err))
			return pin.Pin{}, nil
		}
		return pin.Pin{}, fmt.Errorf("the Node %s's pin: %w", c.NodeName, err)
	}
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	p, ok, err := nodereport.ReadPin(rctx, kc, c.NodeName, member)
	switch {
	case apierrors.IsNotFound(err):
		log.Info("start gate: no Node " + c.NodeName + " to read a pin from; only the state dir's counts")
		return pin.Pin{}, nil
	case err != nil:
		return pin.Pin{}, fmt.Errorf("the Node %s's pin: %w", c.NodeName, err)
	case ok:
		log.Info("start gate: the state dir has no pin, the Node has one (a reinstalled node?)", zap.String("pin", p.String()))
		return p, nil
	}
	return pin.Pin{}, nil
}

// kubeClient is c.KubeClient's. A Config with a node name and no way to
// the API is an error, never "no API" (which reads as no pin: only the
// state dir would count, and a pinned member could bootstrap).
func (c Config) kubeClient() (kubernetes.Interface, error) {
	if c.KubeClient == nil {
		return nil, errors.New("the gate has a node name and no Kubernetes client")
	}
	return c.KubeClient()
}
