package supervisor

import (
	"net"
	"slices"
	"testing"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/manifest"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestPodIPIsStablePerNameAndLabAndStaysOffNodeAddresses(t *testing.T) {
	a := PodIP("lab-1", "clusters-a", "etcd-0")
	if a != PodIP("lab-1", "clusters-a", "etcd-0") {
		t.Fatal("the same pod got two IPs")
	}
	seen := map[string]string{}
	for _, salt := range []string{"lab-1", "lab-2"} {
		for _, ns := range []string{"clusters-a", "clusters-b", "clusters-c"} {
			for _, name := range []string{"etcd-0", "etcd-1", "etcd-2"} {
				ip := PodIP(salt, ns, name)
				if prev, ok := seen[ip]; ok {
					t.Fatalf("%s/%s/%s and %s share %s", salt, ns, name, prev, ip)
				}
				seen[ip] = salt + "/" + ns + "/" + name
				p := net.ParseIP(ip).To4()
				if p == nil || p[0] != 127 || p[1] < 64 || p[1] >= 192 || p[3] == 0 || p[3] == 255 {
					t.Fatalf("%s: %s is outside 127.64.0.0-127.191.255.254", seen[ip], ip)
				}
			}
		}
	}
}

func TestAPILaunchExpandsEnvAndMapsVolumePaths(t *testing.T) {
	c := corev1.Container{
		Command:      []string{"/bin/etcd"},
		Args:         []string{"--name=$(POD_NAME)", "--data-dir=/var/lib/etcd/data", "--listen-peer-urls=http://$(POD_IP):2380", "/var/lib/etcd", "--other=/var/lib/etcdX"},
		Env:          []corev1.EnvVar{{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}}, {Name: "POD_IP", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.podIP"}}}, {Name: "ETCD_WAL_DIR", Value: "/var/lib/etcd/wal"}},
		WorkingDir:   "/var/lib/etcd",
		VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: "/var/lib/etcd"}},
	}
	ls, err := apiLaunch(c, manifest.PodFields{Name: "etcd-1", Namespace: "ns", PodIP: "127.70.1.2"}, map[string]string{"data": "/lab/node2/disk/pv/node2-pv-0"})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"/bin/etcd", "--name=etcd-1", "--data-dir=/lab/node2/disk/pv/node2-pv-0/data", "--listen-peer-urls=http://127.70.1.2:2380",
		"/lab/node2/disk/pv/node2-pv-0", "--other=/var/lib/etcdX"}
	if !slices.Equal(ls.argv, want) {
		t.Fatalf("argv %q\nwant %q", ls.argv, want)
	}
	if !slices.Contains(ls.env, "ETCD_WAL_DIR=/lab/node2/disk/pv/node2-pv-0/wal") || ls.dir != "/lab/node2/disk/pv/node2-pv-0" {
		t.Fatalf("env %q dir %q", ls.env, ls.dir)
	}
	if _, err := apiLaunch(corev1.Container{VolumeMounts: []corev1.VolumeMount{{Name: "nope", MountPath: "/x"}}}, manifest.PodFields{}, nil); err == nil {
		t.Fatal("a mount of an unknown volume ran")
	}
}

func TestPodStatusFollowsContainersAndKeepsTransitionTimes(t *testing.T) {
	pod := &corev1.Pod{Spec: corev1.PodSpec{
		InitContainers: []corev1.Container{{Name: "init"}},
		Containers:     []corev1.Container{{Name: "etcd", ReadinessProbe: &corev1.Probe{}}},
	}}
	ap := &apiPod{ip: "127.70.0.1", started: time.Now()}
	snap := PodState{Containers: map[string]ContainerState{"init": {State: "waiting", Init: true}, "etcd": {State: "waiting"}}}
	st := podStatus(pod, snap, ap, "127.0.0.11")
	if st.Phase != corev1.PodPending || cond(st, corev1.PodReady) != corev1.ConditionFalse || st.PodIP != ap.ip || st.HostIP != "127.0.0.11" {
		t.Fatalf("before init: phase %s ready %s ip %s host %s", st.Phase, cond(st, corev1.PodReady), st.PodIP, st.HostIP)
	}
	snap.Containers["init"] = ContainerState{State: "exited", LastExit: "exit 0", Init: true}
	snap.Containers["etcd"] = ContainerState{State: "running", PID: 42, StartedAt: time.Now()}
	pod.Status = podStatus(pod, snap, ap, "127.0.0.11")
	if pod.Status.Phase != corev1.PodRunning || cond(pod.Status, corev1.PodInitialized) != corev1.ConditionTrue || cond(pod.Status, corev1.PodReady) != corev1.ConditionFalse {
		t.Fatalf("running, probe not passed: %+v", pod.Status.Conditions)
	}
	before := transition(pod.Status, corev1.PodInitialized)
	c := snap.Containers["etcd"]
	c.Ready, c.Restarts = true, 2
	snap.Containers["etcd"] = c
	st = podStatus(pod, snap, ap, "127.0.0.11")
	if cond(st, corev1.PodReady) != corev1.ConditionTrue || st.ContainerStatuses[0].RestartCount != 2 || !st.ContainerStatuses[0].Ready {
		t.Fatalf("probe passed: %+v", st)
	}
	if after := transition(st, corev1.PodInitialized); !after.Equal(&before) {
		t.Fatal("Initialized's transition time moved without a change")
	}
}

func cond(st corev1.PodStatus, t corev1.PodConditionType) corev1.ConditionStatus {
	for _, c := range st.Conditions {
		if c.Type == t {
			return c.Status
		}
	}
	return ""
}

func transition(st corev1.PodStatus, t corev1.PodConditionType) metav1.Time {
	for _, c := range st.Conditions {
		if c.Type == t {
			return c.LastTransitionTime
		}
	}
	return metav1.Time{}
}
