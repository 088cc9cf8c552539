package lab

import (
	"context"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// HostedClusterStatus is one hosted etcd cluster as etcd and the API see it.
type HostedClusterStatus struct {
	Namespace  string         `json:"namespace"`
	Members    []MemberStatus `json:"members"`
	MemberList string         `json:"memberListError,omitempty"`
	Pods       []HostedPod    `json:"pods"`
}

// HostedPod is one member pod with the node, PVC and PV behind it.
type HostedPod struct {
	Name        string `json:"name"`
	Node        string `json:"node,omitempty"`
	Phase       string `json:"phase"`
	Ready       bool   `json:"ready"`
	Terminating bool   `json:"terminating,omitempty"`
	PodIP       string `json:"podIP,omitempty"`
	PVC         string `json:"pvc,omitempty"`
	PVCPhase    string `json:"pvcPhase,omitempty"`
	PV          string `json:"pv,omitempty"`
}

// NodeStatus is a worker Node as the API sees it.
type NodeStatus struct {
	Name          string   `json:"name"`
	Ready         bool     `json:"ready"`
	Unschedulable bool     `json:"unschedulable,omitempty"`
	Taints        []string `json:"taints,omitempty"`
}

// hostedStatus fills the management part of Status.
func (l *Lab) hostedStatus(ctx context.Context, st *Status) {
	kc, err := l.KubeClient()
	if err != nil {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if nodes, err := kc.CoreV1().Nodes().List(ctx, metav1.ListOptions{}); err == nil {
		for i := range nodes.Items {
			n := &nodes.Items[i]
			ns := NodeStatus{Name: n.Name, Ready: NodeReady(n), Unschedulable: n.Spec.Unschedulable}
			for _, t := range n.Spec.Taints {
				ns.Taints = append(ns.Taints, fmt.Sprintf("%s:%s", t.Key, t.Effect))
			}
			st.Nodes = append(st.Nodes, ns)
		}
	}
	for _, ns := range l.Spec.Management.HostedClusters {
		hs := HostedClusterStatus{Namespace: ns}
		l.hostedMembers(ctx, ns, &hs)
		if pods, err := kc.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=" + HostedEtcdName}); err == nil {
			for i := range pods.Items {
				p := &pods.Items[i]
				hp := HostedPod{Name: p.Name, Node: p.Spec.NodeName, Phase: string(p.Status.Phase), Ready: PodReady(p),
					Terminating: p.DeletionTimestamp != nil, PodIP: p.Status.PodIP, PVC: HostedDataPVC(p.Name)}
				if pvc, err := kc.CoreV1().PersistentVolumeClaims(ns).Get(ctx, hp.PVC, metav1.GetOptions{}); err == nil {
					hp.PVCPhase, hp.PV = string(pvc.Status.Phase), pvc.Spec.VolumeName
				}
				hs.Pods = append(hs.Pods, hp)
			}
		}
		st.Hosted = append(st.Hosted, hs)
	}
}

func (l *Lab) hostedMembers(ctx context.Context, ns string, hs *HostedClusterStatus) {
	c, err := l.HostedEtcdClient(ns)
	if err != nil {
		hs.MemberList = err.Error()
		return
	}
	defer c.Close()
	if hs.Members, err = probeMembers(ctx, c, nil, nil); err != nil {
		hs.MemberList = err.Error()
	}
}
