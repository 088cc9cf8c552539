package lab

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/lab/supervisor"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
)

// A hosted cluster's etcd, shaped like a hosted control plane's: a
// 3-replica StatefulSet "etcd" (parallel pod management, one PVC per member
// on the local class, PVCs retained when the set is deleted or scaled, pods
// spread over nodes), a headless discovery Service and a client Service.
// Members are addressed by their pod IPs, which the lab kubelet derives from
// namespace and name (supervisor.PodIP): stable across reschedules, like
// the DNS names a real cluster would use, with no DNS in the lab.
const (
	HostedEtcdName      = "etcd"
	HostedEtcdReplicas  = 3
	hostedDiscoverySvc  = "etcd-discovery"
	hostedClientSvc     = "etcd-client"
	hostedClientPort    = 2379
	hostedPeerPort      = 2380
	hostedMetricsPort   = 2381
	hostedDataMountPath = "/var/lib/etcd"
	hostedAgentMount    = "/lab-nodes"
)

// hostedNamespace: clusters-a .. clusters-z, then clusters-26, clusters-27, ...
func hostedNamespace(i int) string {
	if i < 26 {
		return "clusters-" + string(rune('a'+i))
	}
	return fmt.Sprintf("clusters-%d", i)
}

// HostedReplicas is the member count of each hosted cluster (default
// HostedEtcdReplicas; 1 for the scale benchmark's small clusters).
func (l *Lab) HostedReplicas() int {
	if m := l.Spec.Management; m != nil && m.HostedReplicas > 0 {
		return m.HostedReplicas
	}
	return HostedEtcdReplicas
}

// HostedPodIP is the loopback IP of a hosted member's pod.
func (l *Lab) HostedPodIP(namespace, pod string) string {
	return supervisor.PodIP(l.Spec.Management.PodIPSalt, namespace, pod)
}

// HostedClientURLs are the client URLs of a hosted cluster's members.
func (l *Lab) HostedClientURLs(namespace string) []string {
	var urls []string
	for i := range l.HostedReplicas() {
		urls = append(urls, l.HostedClientURL(namespace, fmt.Sprintf("%s-%d", HostedEtcdName, i)))
	}
	return urls
}

// HostedClientURL is the client URL of a hosted member's pod.
func (l *Lab) HostedClientURL(namespace, pod string) string {
	return fmt.Sprintf("%s://%s:%d", l.hostedScheme(namespace), l.HostedPodIP(namespace, pod), hostedClientPort)
}

// CreateHostedCluster creates namespace ns with its etcd StatefulSet and
// Services.
func (l *Lab) CreateHostedCluster(ctx context.Context, ns string) error {
	kc, err := l.KubeClient()
	if err != nil {
		return err
	}
	if _, err := kc.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); ignoreExists(err) != nil {
		return err
	}
	labels := map[string]string{"app": HostedEtcdName}
	ports := []corev1.ServicePort{{Name: "client", Port: hostedClientPort}, {Name: "peer", Port: hostedPeerPort}}
	for _, svc := range []*corev1.Service{
		{ObjectMeta: metav1.ObjectMeta{Name: hostedDiscoverySvc}, Spec: corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone, Selector: labels, Ports: ports, PublishNotReadyAddresses: true}},
		{ObjectMeta: metav1.ObjectMeta{Name: hostedClientSvc}, Spec: corev1.ServiceSpec{Selector: labels, Ports: ports[:1]}},
	} {
		if _, err := kc.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{}); ignoreExists(err) != nil {
			return fmt.Errorf("create service %s/%s: %w", ns, svc.Name, err)
		}
	}
	if l.hostedTLS(ns) {
		if err := l.createHostedTLSSecret(ctx, ns); err != nil {
			return err
		}
	}
	sts, err := l.hostedStatefulSet(ns)
	if err != nil {
		return err
	}
	if _, err := kc.AppsV1().StatefulSets(ns).Create(ctx, sts, metav1.CreateOptions{}); ignoreExists(err) != nil {
		return fmt.Errorf("create statefulset %s/%s: %w", ns, HostedEtcdName, err)
	}
	l.Spec.Management.HostedClusters = append(l.Spec.Management.HostedClusters, ns)
	l.log.Info("created hosted etcd cluster", zap.String("namespace", ns))
	return l.Spec.save()
}

func (l *Lab) hostedStatefulSet(ns string) (*appsv1.StatefulSet, error) {
	var peers []string
	for i := range l.HostedReplicas() {
		name := fmt.Sprintf("%s-%d", HostedEtcdName, i)
		peers = append(peers, fmt.Sprintf("%s=%s://%s:%d", name, l.hostedScheme(ns), l.HostedPodIP(ns, name), hostedPeerPort))
	}
	scheme := l.hostedScheme(ns)
	labels := map[string]string{"app": HostedEtcdName}
	args := []string{
		"--name=$(POD_NAME)",
		fmt.Sprintf("--listen-client-urls=%s://$(POD_IP):%d", scheme, hostedClientPort),
		fmt.Sprintf("--advertise-client-urls=%s://$(POD_IP):%d", scheme, hostedClientPort),
		fmt.Sprintf("--listen-peer-urls=%s://$(POD_IP):%d", scheme, hostedPeerPort),
		fmt.Sprintf("--initial-advertise-peer-urls=%s://$(POD_IP):%d", scheme, hostedPeerPort),
		fmt.Sprintf("--listen-metrics-urls=http://$(POD_IP):%d", hostedMetricsPort),
		"--initial-cluster=" + strings.Join(peers, ","),
		"--initial-cluster-state=new",
		"--initial-cluster-token=" + ns + "-" + l.Spec.ClusterToken,
		"--logger=zap", "--log-outputs=stderr",
	}
	fieldEnv := func(name, path string) corev1.EnvVar {
		return corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: path}}}
	}
	command := []string{l.Spec.etcdBinary()}
	image, err := EtcdImageOf(command[0])
	if err != nil {
		return nil, err
	}
	env := []corev1.EnvVar{fieldEnv("POD_NAME", "metadata.name"), fieldEnv("POD_IP", "status.podIP")}
	mounts := []corev1.VolumeMount{{Name: "data", MountPath: hostedDataMountPath}}
	args, mounts, err = layHostedPod(l.hostedLayout(ns), args, mounts)
	if err != nil {
		return nil, err
	}
	initContainers := hostedInitContainers(l.hostedLayout(ns), mounts, image)
	var volumes []corev1.Volume
	var gateTLS []string
	if l.hostedTLS(ns) {
		args, gateTLS, mounts, volumes = hostedTLSPod(args, nil, mounts, volumes)
	}
	if l.Spec.Agents {
		// etcd runs through the start gate, which reads the member's state
		// dir kept by the agent of the node the pod runs on (a hostPath: on
		// a real node /var/lib/etcd-agent; the lab's nodes share one
		// filesystem, so the node's name picks its folder).
		gate := append([]string{l.Spec.AgentBinary, "gate", "--member-source=pods",
			"--state-dir=" + hostedAgentMount + "/$(NODE_NAME)/agent-state/members/$(POD_NAMESPACE)_$(POD_NAME)",
			"--endpoints=" + strings.Join(l.HostedClientURLs(ns), ","), "--poll-interval=500ms", "--log-format=json"}, gateTLS...)
		command = append(append(gate, "--"), command...)
		env = append([]corev1.EnvVar{fieldEnv("NODE_NAME", "spec.nodeName"), fieldEnv("POD_NAMESPACE", "metadata.namespace")}, env...)
		mounts = append(mounts, corev1.VolumeMount{Name: "agent-state", MountPath: hostedAgentMount})
		volumes = append(volumes, corev1.Volume{Name: "agent-state", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: l.Spec.Dir}}})
	}
	return &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: HostedEtcdName, Labels: labels},
		Spec: appsv1.StatefulSetSpec{
			Replicas: ptr(int32(l.HostedReplicas())), ServiceName: hostedDiscoverySvc,
			PodManagementPolicy: appsv1.ParallelPodManagement,
			Selector:            &metav1.LabelSelector{MatchLabels: labels},
			PersistentVolumeClaimRetentionPolicy: &appsv1.StatefulSetPersistentVolumeClaimRetentionPolicy{
				WhenDeleted: appsv1.RetainPersistentVolumeClaimRetentionPolicyType, WhenScaled: appsv1.RetainPersistentVolumeClaimRetentionPolicyType},
			VolumeClaimTemplates: []corev1.PersistentVolumeClaim{{
				ObjectMeta: metav1.ObjectMeta{Name: "data"},
				Spec: corev1.PersistentVolumeClaimSpec{
					AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}, StorageClassName: ptr(LocalStorageClass),
					Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse(PVSize)}},
				},
			}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					TerminationGracePeriodSeconds: ptr(int64(10)),
					// etcd needs no API access (and the lab kubelet mounts no
					// projected service-account tokens).
					AutomountServiceAccountToken: ptr(false),
					Volumes:                      volumes,
					InitContainers:               initContainers,
					Affinity: &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
						LabelSelector: &metav1.LabelSelector{MatchLabels: labels}, TopologyKey: "kubernetes.io/hostname"}}}},
					Containers: []corev1.Container{{
						Name: "etcd", Image: image,
						Command:      command,
						Args:         args,
						Env:          env,
						VolumeMounts: mounts,
						Ports: []corev1.ContainerPort{{Name: "client", ContainerPort: hostedClientPort}, {Name: "peer", ContainerPort: hostedPeerPort},
							{Name: "metrics", ContainerPort: hostedMetricsPort}},
						ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/readyz", Port: intstr.FromString("metrics")}},
							PeriodSeconds: 2, FailureThreshold: 3, TimeoutSeconds: 2},
					}},
				},
			},
		},
	}, nil
}

// HostedEtcdClient is a client for a hosted cluster's members.
func (l *Lab) HostedEtcdClient(namespace string) (*clientv3.Client, error) {
	t, err := l.HostedTLSConfig(namespace)
	if err != nil {
		return nil, err
	}
	return clientv3.New(clientv3.Config{Endpoints: l.HostedClientURLs(namespace), DialTimeout: 3 * time.Second, TLS: t, Logger: zap.NewNop()})
}

// HostedHealth says how a hosted cluster stands: its members as etcd lists
// them, and which answer Status.
type HostedHealth struct {
	Namespace string
	Members   int
	Healthy   int
	Err       error
}

// HostedClusterHealth asks each member of the hosted cluster for its Status.
func (l *Lab) HostedClusterHealth(ctx context.Context, namespace string) HostedHealth {
	h := HostedHealth{Namespace: namespace}
	c, err := l.HostedEtcdClient(namespace)
	if err != nil {
		h.Err = err
		return h
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	ml, err := c.MemberList(ctx)
	if err != nil {
		h.Err = err
		return h
	}
	h.Members = len(ml.Members)
	for _, u := range l.HostedClientURLs(namespace) {
		if _, err := c.Status(ctx, u); err == nil {
			h.Healthy++
		} else {
			h.Err = err
		}
	}
	return h
}

// WaitHostedClustersHealthy waits until every hosted cluster has all its
// members serving and every member pod is Running and Ready in the API.
func (l *Lab) WaitHostedClustersHealthy(ctx context.Context, timeout time.Duration) error {
	kc, err := l.KubeClient()
	if err != nil {
		return err
	}
	var last error
	err = wait.PollUntilContextTimeout(ctx, time.Second, timeout, true, func(ctx context.Context) (bool, error) {
		for _, ns := range l.Spec.Management.HostedClusters {
			if h := l.HostedClusterHealth(ctx, ns); h.Healthy != l.HostedReplicas() {
				last = fmt.Errorf("%s: %d of %d members serve (%v)", ns, h.Healthy, l.HostedReplicas(), h.Err)
				return false, nil
			}
			pods, err := kc.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=" + HostedEtcdName})
			if err != nil {
				last = err
				return false, nil
			}
			ready := 0
			for i := range pods.Items {
				if PodReady(&pods.Items[i]) {
					ready++
				}
			}
			if ready != l.HostedReplicas() {
				last = fmt.Errorf("%s: %d of %d pods Ready", ns, ready, l.HostedReplicas())
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("hosted clusters not healthy after %s: %v", timeout, last)
	}
	return nil
}

// PodReady reports the pod's Ready condition (and that it runs).
func PodReady(p *corev1.Pod) bool {
	if p.Status.Phase != corev1.PodRunning || p.DeletionTimestamp != nil {
		return false
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
