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
	"slices"

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
// error (never "no record": that would let a member bootstrap). A record
// of an earlier incarnation (Live) reads as none.
func (s Store) ReadPins(ctx context.Context) (map[string]pin.Pin, bool, error) {
	cm, err := s.KC.CoreV1().ConfigMaps(s.Namespace).Get(ctx, Name(s.Cluster), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return map[string]pin.Pin{}, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	pins, err := s.decode(cm)
	if err != nil {
		return nil, false, err
	}
	live, err := s.Live(ctx, pins)
	if err != nil {
		return nil, false, err
	}
	if !live {
		return map[string]pin.Pin{}, false, nil
	}
	return pins, len(pins) > 0, nil
}

// Live: at least one of the pins' claims still exists, Terminating or not
// (or a pin names no claim, so nothing can be told). When every member's
// claim is gone, the
// cluster was created again from scratch under the same name (scaled to 0,
// its PVCs deleted): its members are new, and the old pins would hold
// their gates for good. The steward deletes one member's claim at a time,
// with a quorum of members on their claims, so a record is never dead
// while its cluster lives.
func (s Store) Live(ctx context.Context, pins map[string]pin.Pin) (bool, error) {
	if len(pins) == 0 {
		return true, nil
	}
	for _, p := range pins {
		if p.ClaimName == "" {
			return true, nil
		}
		c, err := s.KC.CoreV1().PersistentVolumeClaims(s.Namespace).Get(ctx, p.ClaimName, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
		case err != nil:
			return false, fmt.Errorf("is the record %s live? its claim %s: %w", s.Where(), p.ClaimName, err)
		case string(c.UID) == p.ClaimUID: // Terminating too: in use until its pod goes
			return true, nil
		}
	}
	return false, nil
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
// version, retried on conflict, so other members' pins survive). Only a
// member's first pin (first) replaces a record of an earlier incarnation:
// a member that served before is proof the record's cluster lives.
func (s Store) WritePin(ctx context.Context, p pin.Pin, first bool) error {
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
			if o := s.ownerRef(); o != nil {
				cm.OwnerReferences = []metav1.OwnerReference{*o}
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
		if first {
			if live, err := s.Live(ctx, pins); err != nil {
				return err
			} else if !live {
				pins = map[string]pin.Pin{} // an earlier incarnation's: replaced
			}
		}
		v, err := pin.EncodeWith(pins, p)
		if err != nil {
			return err
		}
		if cm.Data == nil {
			cm.Data = map[string]string{}
		}
		cm.Data[DataKey] = v
		if o := s.ownerRef(); o != nil && !slices.ContainsFunc(cm.OwnerReferences, func(r metav1.OwnerReference) bool { return r.UID == o.UID }) {
			// The StatefulSet was deleted (orphaning) and created again:
			// owned by the new one, or the collector deletes the record.
			cm.OwnerReferences = []metav1.OwnerReference{*o}
		}
		_, err = cms.Update(ctx, cm, metav1.UpdateOptions{})
		return err
	})
}

// ownerRef is the record's owner reference: neither controller nor
// blocking the owner's deletion.
func (s Store) ownerRef() *metav1.OwnerReference {
	if s.Owner == nil {
		return nil
	}
	o := *s.Owner
	o.Controller, o.BlockOwnerDeletion = nil, nil
	return &o
}
