// Package clusterrecord keeps the pins of an etcd cluster whose members
// run as pods (--member-source=pods) in a ConfigMap in the cluster's
// namespace. A pod member's pin must outlive its node and its claim: the
// steward moves a member to another node, and a new node's state dir (and
// a new claim's) starts empty; the record is what tells that member's
// start gate, through its agent, that the cluster has served before.
//
// The ConfigMap is owned by the pods' StatefulSet (when they have one), so
// deleting the StatefulSet deletes the record with it (an orphaning delete
// keeps it), and a cluster created again from scratch is not held back by
// its predecessor's pins.
package clusterrecord

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"

	"github.com/etcd-agent/etcd-agent/internal/pin"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
)

const (
	// DataKey holds the JSON map member name -> pin.
	DataKey = "pins"
	// AnnotationCluster names the cluster the record is for (the name is
	// a hash of it).
	AnnotationCluster = "etcd-agent.io/cluster"
	// LabelRecord marks the agent's records (kubectl get cm -l ...).
	LabelRecord = "etcd-agent.io/record"
)

// Name is the ConfigMap's name for cluster (membersource.ClusterOf).
func Name(cluster string) string {
	h := sha256.Sum256([]byte(cluster))
	return "etcd-agent-pins-" + hex.EncodeToString(h[:])[:12]
}

// Store is one cluster's record.
type Store struct {
	KC        kubernetes.Interface
	Namespace string
	Cluster   string
	// Owner, when set, owns a record this store creates.
	Owner *metav1.OwnerReference
}

// Where names the record for logs: namespace/name.
func (s Store) Where() string { return s.Namespace + "/" + Name(s.Cluster) }

// ReadPins returns the record's pins and whether the record pins any
// member. A record that is not the agent's or cannot be decoded is an
// error (never "no record": that would let a member bootstrap).
func (s Store) ReadPins(ctx context.Context) (map[string]pin.Pin, bool, error) {
	cm, err := s.KC.CoreV1().ConfigMaps(s.Namespace).Get(ctx, Name(s.Cluster), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return map[string]pin.Pin{}, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	pins, err := s.decode(cm)
	return pins, len(pins) > 0, err
}

func (s Store) decode(cm *corev1.ConfigMap) (map[string]pin.Pin, error) {
	if got := cm.Annotations[AnnotationCluster]; got != s.Cluster {
		return nil, fmt.Errorf("ConfigMap %s is the record of cluster %q, not %q (fix or remove it by hand)", s.Where(), got, s.Cluster)
	}
	pins, err := pin.DecodeMap(cm.Data[DataKey])
	if err != nil {
		return nil, fmt.Errorf("ConfigMap %s: %s: %w (fix or remove it by hand)", s.Where(), DataKey, err)
	}
	return pins, nil
}

// WritePin records p (read-modify-write on the ConfigMap's resource
// version, retried on conflict, so other members' pins survive).
func (s Store) WritePin(ctx context.Context, p pin.Pin) error {
	return retry.OnError(retry.DefaultRetry, func(err error) bool { return apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err) }, func() error {
		cms := s.KC.CoreV1().ConfigMaps(s.Namespace)
		cm, err := cms.Get(ctx, Name(s.Cluster), metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			v, err := pin.EncodeWith(map[string]pin.Pin{}, p)
			if err != nil {
				return err
			}
			cm = &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: Name(s.Cluster), Namespace: s.Namespace,
				Labels: map[string]string{LabelRecord: DataKey}, Annotations: map[string]string{AnnotationCluster: s.Cluster}},
				Data: map[string]string{DataKey: v}}
			if s.Owner != nil {
				o := *s.Owner
				o.Controller, o.BlockOwnerDeletion = nil, nil
				cm.OwnerReferences = []metav1.OwnerReference{o}
			}
			_, err = cms.Create(ctx, cm, metav1.CreateOptions{})
			return err
		}
		if err != nil {
			return err
		}
		pins, err := s.decode(cm)
		if err != nil {
			return err
		}
		v, err := pin.EncodeWith(pins, p)
		if err != nil {
			return err
		}
		if cm.Data == nil {
			cm.Data = map[string]string{}
		}
		cm.Data[DataKey] = v
		_, err = cms.Update(ctx, cm, metav1.UpdateOptions{})
		return err
	})
}
