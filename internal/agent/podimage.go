package agent

import (
	"context"
	"sync"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/podfacts"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// podImageRecheck spaces the API reads behind a pod member's learner image
// (one pod, one StatefulSet): the decision asks at every poll.
const podImageRecheck = 10 * time.Second

// podLearnerImage is the etcd image a pod member runs once the agent has
// deleted its pod: what its StatefulSet re-creates it with, which mid-way
// through a rollout is not the image of the pod now (plan's version rule;
// a stalled Helm upgrade keeps a lost member on the old image while the
// template names the new one). "" when it cannot be told.
type podLearnerImage struct {
	kc      kubernetes.Interface
	ns, pod string
	mu      sync.Mutex
	at      time.Time
	image   string
}

func (p *podLearnerImage) get() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.at.IsZero() && time.Since(p.at) < podImageRecheck {
		return p.image
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	p.image, p.at = p.read(ctx), time.Now()
	return p.image
}

func (p *podLearnerImage) read(ctx context.Context) string {
	pod, err := p.kc.CoreV1().Pods(p.ns).Get(ctx, p.pod, metav1.GetOptions{})
	if err != nil {
		return ""
	}
	sts, why, err := podfacts.ControllingStatefulSet(ctx, p.kc, pod)
	if why != "" || err != nil {
		return podfacts.EtcdImage(pod) // not re-created by a StatefulSet: as it is
	}
	return podfacts.RecreatedImage(pod, sts)
}
