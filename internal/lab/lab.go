package lab

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/pin"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// Options configure Up.
type Options struct {
	Dir   string
	Nodes int
	// BinDir holds etcd, etcdctl and kube-apiserver (built by `make tools`).
	BinDir string
	// EtcdBinary, if set, is the etcd the members run instead of
	// BinDir/etcd (e.g. bin/etcd-3.7).
	EtcdBinary string
	// EtcdBinaries, if set, is node<i>'s etcd at index i-1 (missing or "":
	// EtcdBinary): a lab whose members run different etcd versions.
	EtcdBinaries []string
	// EtcdQuotaBytes sets the members' --quota-backend-bytes (0: etcd's
	// default of 2 GiB; a bench of larger dbs needs more, etcd allows 8 GiB).
	EtcdQuotaBytes int64
	// EtcdNoPurge runs the members with --max-snapshots=0 --max-wals=0:
	// etcd's purge loop, which exits etcd at its next 30 s tick once a
	// running member's data dir is wiped, does not run (a test that needs
	// a wiped member serving for longer than that).
	EtcdNoPurge bool
	// DataDirLayouts lays out node<i>'s data dir as DataDirLayouts[i-1]
	// (layout.go; missing or "": a plain dir).
	DataDirLayouts []string
	// EtcdWALDir runs every member with a dedicated --wal-dir
	// (<disk>/wal/etcd, on a hostPath volume of its own at <disk>/wal), as
	// etcd's tuning guide lays out a WAL on its own disk.
	EtcdWALDir bool
	// AgentBinary is the etcd-agent binary: each member's gate, and `run`
	// as the agent with Agents.
	AgentBinary string
	// LabBinary is the etcd-agent-lab binary: the lab runs its `supervise`
	// as each node's supervisor (and `real-node`). Default: etcd-agent-lab
	// beside AgentBinary (the lab is not in the product binary, issue 42).
	LabBinary string
	// NoAPIServer skips the kube-apiserver (faster, for etcd-only tests).
	NoAPIServer bool
	Agents      bool
	AgentArgs   []string
	// Failpoints turn the agents' test hooks on (GOFAIL_FAILPOINTS terms,
	// e.g. heal.HoldAtFailpoint; labtest.BuildAgent's agent only).
	Failpoints []string
	// EtcdTLS runs etcd with client and peer TLS and client cert auth, as a
	// kubeadm control plane does; everyone reaches it with a client cert.
	EtcdTLS bool
	// PeerProxy puts an HTTP proxy, run by this process until Down, in
	// front of every member's peer listener, so that Partition can cut a
	// node's peer traffic (see peerproxy.go). It needs EtcdTLS off. Only a
	// Go caller that outlives the lab can use it (not the CLI's `lab up`).
	PeerProxy bool
	// DiskLimit, in bytes, makes each node's DiskDir a tmpfs of that size
	// (when this process may mount; see DiskFaultsAvailable), so that
	// FillDisk can fill it. 0: plain folders. Give a member at least
	// 256 MiB: etcd preallocates 64 MB WAL segments (the current one and
	// the next), and a WAL repair copies the last segment aside (.broken)
	// before truncating it.
	DiskLimit int64
	// Management makes a management lab instead (mgmt.go): Nodes worker
	// nodes run by lab kubelets, the real controller-manager and scheduler,
	// PVsPerNode local PVs per worker (0: one more than HostedClusters, at
	// least 3) and HostedClusters etcd StatefulSets.
	Management     bool
	HostedClusters int
	PVsPerNode     int
	// RealNode makes the last node a real one (realnode.go): the real
	// kubelet, containerd and runc in namespaces of its own, running a
	// kubeadm-style etcd static pod and, with Agents, the shipped
	// DaemonSet. It needs root, EtcdTLS, `make tools images`.
	RealNode bool
	// RealNodeAgentEnv are ETCD_AGENT_* settings of the real node's agent,
	// merged into the shipped DaemonSet's env (AgentArgs are the stand-ins').
	RealNodeAgentEnv map[string]string
	// HostedLayouts lays out hosted cluster i's data dir as
	// HostedLayouts[i] (hostedlayout.go; missing or "": a subdir of the claim).
	HostedLayouts []string
	// HostedTLS: hosted cluster i serves TLS when HostedTLS[i]
	// (hostedtls.go: client and peer, a CA of its own, certs from a Secret).
	HostedTLS []bool
	// HostedReplicas: members per hosted cluster (0: HostedEtcdReplicas).
	HostedReplicas int
	// SnapshotStore gives the agents a --snapshot-store: SnapshotStoreFile
	// (a lab folder) or SnapshotStoreS3 (a real S3 server); "" none.
	SnapshotStore string
	Log           *zap.Logger
}

// AgentNamespace is where the agents' Leases live in the lab.
const AgentNamespace = "etcd-agent"

// Lab is a running (or stopped) lab described by its Spec.
type Lab struct {
	Spec *Spec
	log  *zap.Logger
	// peers are the peer proxies, when this process runs them (Up with
	// PeerProxy); nil in a lab Open'ed by another process.
	peers *peerProxies
	// wipes are this process's WipeDataDir faults (Wipes).
	wipesMu sync.Mutex
	wipes   []Wipe
}

// Open attaches to the lab in dir (started by Up, maybe by another process).
func Open(dir string, log *zap.Logger) (*Lab, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	s, err := LoadSpec(abs)
	if err != nil {
		return nil, err
	}
	if log == nil {
		log = zap.NewNop()
	}
	return &Lab{Spec: s, log: log}, nil
}

// Up creates the lab's nodes, starts their supervisors (which start etcd),
// waits for a healthy cluster, then starts kube-apiserver on it, waits for
// it to be ready and creates a Node object per lab node.
func Up(ctx context.Context, o Options) (_ *Lab, err error) {
	if o.PeerProxy && o.EtcdTLS {
		return nil, errors.New("PeerProxy needs EtcdTLS off: the peer proxies read plain http")
	}
	if o.Management {
		if err := validateManagement(o); err != nil {
			return nil, err
		}
	}
	if o.DiskLimit < 0 {
		return nil, fmt.Errorf("DiskLimit must not be negative, got %d", o.DiskLimit)
	}
	if o.Nodes < 1 || o.Nodes > 9 {
		return nil, fmt.Errorf("--nodes must be 1..9, got %d", o.Nodes)
	}
	if o.Log == nil {
		o.Log = zap.NewNop()
	}
	dir, err := filepath.Abs(o.Dir)
	if err != nil {
		return nil, err
	}
	if s, err := LoadSpec(dir); err == nil && len((&Lab{Spec: s}).liveProcesses()) > 0 {
		return nil, fmt.Errorf("a lab is already running in %s: run `etcd-agent-lab down --dir %s` first", dir, dir)
	}
	if err := checkBinaries(o); err != nil {
		return nil, err
	}
	for _, sub := range []string{"", "apiserver"} {
		if err := os.MkdirAll(filepath.Join(dir, sub), 0o755); err != nil {
			return nil, err
		}
	}
	tok := make([]byte, 4)
	_, _ = rand.Read(tok)
	spec := &Spec{Dir: dir, ClusterToken: "lab-" + hex.EncodeToString(tok), BinDir: o.BinDir, EtcdBinary: o.EtcdBinary, EtcdQuotaBytes: o.EtcdQuotaBytes, EtcdNoPurge: o.EtcdNoPurge, EtcdWALDir: o.EtcdWALDir, DataDirLayouts: o.DataDirLayouts,
		AgentBinary: o.AgentBinary, LabBinary: o.labBinary(), AgentArgs: o.AgentArgs, Failpoints: o.Failpoints, Agents: o.Agents, CreatedAt: time.Now().UTC(),
		PeerProxy: o.PeerProxy, DiskLimit: o.DiskLimit}
	l := &Lab{Spec: spec, log: o.Log}
	if o.PeerProxy {
		l.peers = newPeerProxies(o.Log)
	}
	// An Up that fails leaves no mount and no proxy behind: with either,
	// it stops what it started (a lab without them is left for Down, as before).
	defer func() {
		if err != nil && (len(spec.DiskMounts) > 0 || l.peers != nil || spec.RealNode != nil) {
			if derr := l.Down(context.WithoutCancel(ctx)); derr != nil {
				err = errors.Join(err, derr)
			}
		}
	}()
	if o.SnapshotStore != "" {
		saveStarted := func(st *SnapshotStore) error { spec.SnapshotStore = st; return spec.save() }
		if spec.SnapshotStore, err = startSnapshotStore(ctx, o.BinDir, dir, o.SnapshotStore, o.Log, saveStarted); err != nil {
			return l, err
		}
		if err := spec.save(); err != nil {
			return l, err
		}
	}
	if o.Management {
		return l, l.upManagement(ctx, o)
	}
	if o.RealNode {
		return l, l.upWithRealNode(ctx, o)
	}
	if o.EtcdTLS {
		if spec.EtcdTLS, err = writeEtcdPKI(filepath.Join(dir, "pki", "etcd")); err != nil {
			return nil, fmt.Errorf("lab etcd PKI: %w", err)
		}
	}
	for i := 1; i <= o.Nodes; i++ {
		n, err := l.newNode(i, true)
		if err != nil {
			return nil, err
		}
		n.EtcdBinary = o.nodeEtcdBinary(i)
		spec.Nodes = append(spec.Nodes, n)
	}
	if err := spec.save(); err != nil { // records the mounts
		return l, err
	}
	for _, n := range spec.Nodes {
		if l.peers != nil {
			if err := l.peers.start(n.PeerURL, n.PeerListenURL); err != nil {
				return l, err
			}
		}
	}
	ic := initialCluster(spec.Nodes)
	for _, n := range spec.Nodes {
		m, err := etcdPodManifest(spec, n, ic, "new", spec.ClusterToken, l.gateCommand(n), spec.EtcdTLS)
		if err != nil {
			return nil, err
		}
		if err := os.WriteFile(n.EtcdManifest(), m, 0o644); err != nil {
			return nil, err
		}
	}
	for i := range spec.Nodes {
		if err := l.startSupervisor(&spec.Nodes[i]); err != nil {
			return l, err
		}
	}
	if err := spec.save(); err != nil {
		return l, err
	}
	start := time.Now()
	if err := l.WaitHealthy(ctx, len(spec.Nodes), 60*time.Second); err != nil {
		return l, err
	}
	o.Log.Info("etcd cluster healthy", zap.Int("members", len(spec.Nodes)), zap.Duration("took", time.Since(start)))
	if o.NoAPIServer {
		return l, l.startAgents(ctx)
	}
	a, proc, err := startAPIServer(o.BinDir, filepath.Join(dir, "apiserver"), spec.ClientURLs(), spec.EtcdTLS)
	if err != nil {
		return l, err
	}
	spec.APIServer = a
	if err := spec.save(); err != nil {
		return l, err
	}
	if err := waitAPIReady(ctx, a, proc, 120*time.Second); err != nil {
		return l, err
	}
	o.Log.Info("kube-apiserver ready", zap.String("url", a.URL), zap.Duration("took", time.Since(start)))
	if err := l.bootstrapObjects(ctx); err != nil {
		return l, err
	}
	if err := l.startAgents(ctx); err != nil {
		return l, err
	}
	return l, spec.save()
}

// labBinary is o.LabBinary, else etcd-agent-lab beside the agent binary
// (bin/ after `make build`, a test's build folder after labtest.BuildAgent).
func (o Options) labBinary() string {
	if o.LabBinary != "" || o.AgentBinary == "" {
		return o.LabBinary
	}
	return filepath.Join(filepath.Dir(o.AgentBinary), "etcd-agent-lab")
}

func checkBinaries(o Options) error {
	var missing []string
	etcd := o.EtcdBinary
	if etcd == "" {
		etcd = filepath.Join(o.BinDir, "etcd")
	}
	need := []string{etcd, o.AgentBinary, o.labBinary()}
	if len(o.EtcdBinaries) > o.Nodes {
		return fmt.Errorf("%d etcd binaries for %d nodes", len(o.EtcdBinaries), o.Nodes)
	}
	for _, b := range o.EtcdBinaries {
		if b != "" {
			need = append(need, b)
		}
	}
	if !o.NoAPIServer {
		need = append(need, filepath.Join(o.BinDir, "kube-apiserver"))
	}
	if o.Management {
		need = append(need, filepath.Join(o.BinDir, "kube-controller-manager"), filepath.Join(o.BinDir, "kube-scheduler"))
	}
	if o.SnapshotStore == SnapshotStoreS3 {
		need = append(need, filepath.Join(o.BinDir, "weed"))
	}
	for _, p := range need {
		if st, err := os.Stat(p); err != nil || st.IsDir() {
			missing = append(missing, p)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("missing binaries %s: run `make tools` (etcd, kube-apiserver, ...) and `make build` (etcd-agent)", strings.Join(missing, ", "))
	}
	return nil
}

// nodeEtcdBinary is node<i>'s own etcd from EtcdBinaries ("": the lab's).
func (o Options) nodeEtcdBinary(i int) string {
	if i-1 < len(o.EtcdBinaries) {
		return o.EtcdBinaries[i-1]
	}
	return ""
}

// newNode lays out node i's folders and picks its loopback IP and ports.
// withMember gives it an etcd member named after the node.
func (l *Lab) newNode(i int, withMember bool) (Node, error) {
	return l.newNamedNode(fmt.Sprintf("node%d", i), fmt.Sprintf("127.0.0.%d", 10+i), withMember)
}

// nextNodeNumber is one past the highest nodeN in the lab.
func (l *Lab) nextNodeNumber() int {
	next := 1
	for _, n := range l.Spec.Nodes {
		var i int
		if _, err := fmt.Sscanf(n.Name, "node%d", &i); err == nil && i >= next {
			next = i + 1
		}
	}
	return next
}

func (l *Lab) newNamedNode(name, ip string, withMember bool) (Node, error) {
	nodeDir := filepath.Join(l.Spec.Dir, name)
	n := Node{Name: name, IP: ip, NodeDir: nodeDir,
		DiskDir: filepath.Join(nodeDir, "disk"), ManifestsDir: filepath.Join(nodeDir, "manifests"),
		LogsDir: filepath.Join(nodeDir, "logs"), StateDir: filepath.Join(nodeDir, "agent-state")}
	for _, d := range []string{n.DiskDir, n.ManifestsDir, n.LogsDir, n.StateDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return n, err
		}
	}
	if err := l.mountDisk(n); err != nil {
		return n, err
	}
	if withMember {
		nports := 3 // client, peer, metrics
		if l.Spec.PeerProxy {
			nports = 4 // and the peer proxy
		}
		ports, err := freePorts(n.IP, nports)
		if err != nil {
			return n, err
		}
		n.Member = name
		scheme := "http"
		if l.Spec.EtcdTLS != nil {
			scheme = "https"
		}
		n.ClientURL = fmt.Sprintf("%s://%s:%d", scheme, n.IP, ports[0])
		n.PeerURL = fmt.Sprintf("%s://%s:%d", scheme, n.IP, ports[1])
		// Plain HTTP, as kubeadm's --listen-metrics-urls=http://127.0.0.1:2381.
		n.MetricsURL = fmt.Sprintf("http://%s:%d", n.IP, ports[2])
		if l.Spec.PeerProxy {
			// The member listens on ports[1] and advertises its proxy.
			n.PeerListenURL = n.PeerURL
			n.PeerURL = fmt.Sprintf("%s://%s:%d", scheme, n.IP, ports[3])
		}
		n.DataDir = filepath.Join(n.DiskDir, "etcd")
		if l.Spec.EtcdWALDir {
			// A subdir of the WAL volume: etcd cannot create a WAL at a
			// mount point (plan.WALDirDisposal).
			n.WALDir = filepath.Join(n.DiskDir, "wal", "etcd")
		}
		var i int
		if _, err := fmt.Sscanf(name, "node%d", &i); err == nil && i >= 1 && i <= len(l.Spec.DataDirLayouts) {
			n.DataDirLayout = l.Spec.DataDirLayouts[i-1]
		}
		if err := l.layDataDir(&n); err != nil {
			return n, err
		}
	}
	return n, nil
}

// startSupervisor starts the node's kubelet-like supervisor process.
func (l *Lab) startSupervisor(n *Node) error {
	argv := []string{l.Spec.LabBinary, "supervise", "--node-dir", n.NodeDir, "--log-format", "json"}
	proc, err := startDetached(argv, filepath.Join(n.LogsDir, "supervisor.log"))
	if err != nil {
		return err
	}
	n.SupervisorPID = proc.PID
	n.Lost = false
	return nil
}

// startAgents places the agent's static pod on every node (with Agents) and
// waits until each agent serves /readyz.
func (l *Lab) startAgents(ctx context.Context) error {
	if !l.Spec.Agents {
		return nil
	}
	for i := range l.Spec.Nodes {
		if l.Spec.Nodes[i].Real {
			if err := l.applyShippedDaemonSet(ctx, l.Spec.Nodes[i]); err != nil {
				return err
			}
			continue
		}
		if err := l.writeAgentManifest(&l.Spec.Nodes[i]); err != nil {
			return err
		}
	}
	if err := l.Spec.save(); err != nil {
		return err
	}
	for _, n := range l.Spec.Nodes {
		if err := waitAgentReady(ctx, n, 60*time.Second); err != nil {
			return err
		}
		if err := waitPinned(ctx, n, 60*time.Second); err != nil {
			return err
		}
	}
	return nil
}

// waitPinned waits until node n's agent has pinned its member (seen it
// serve): from then on its start gate knows that the member existed, and a
// scenario's fault is judged as on a node that has run for a while.
func waitPinned(ctx context.Context, n Node, timeout time.Duration) error {
	if n.Member == "" {
		return nil
	}
	deadline := time.Now().Add(timeout)
	for {
		if _, ok, err := pin.Load(n.StateDir, n.Member); err != nil || ok {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("agent on %s has not pinned member %s after %s", n.Name, n.Member, timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// bootstrapObjects creates what the agents expect in the API: their
// namespace and a Node object per lab node.
func (l *Lab) bootstrapObjects(ctx context.Context) error {
	kc, err := l.KubeClient()
	if err != nil {
		return err
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: AgentNamespace}}
	if _, err := kc.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create namespace %s: %w", AgentNamespace, err)
	}
	for _, n := range l.Spec.Nodes {
		if n.Real {
			continue // its kubelet registers it
		}
		if err := l.createNodeObject(ctx, kc, n); err != nil {
			return err
		}
	}
	return nil
}

func (l *Lab) createNodeObject(ctx context.Context, kc kubernetes.Interface, n Node) error {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n.Name, Labels: map[string]string{
		"node-role.kubernetes.io/control-plane": "", "kubernetes.io/hostname": n.Name}}}
	node.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: n.IP}}
	// Ready as a kubelet reports it when it registers (nothing in this lab
	// updates it later; a move refuses a target that is not Ready).
	now := metav1.Now()
	node.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady",
		LastHeartbeatTime: now, LastTransitionTime: now}}
	if _, err := kc.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create node %s: %w", n.Name, err)
	}
	return nil
}

// EtcdClient returns a client for all live members' client URLs.
func (l *Lab) EtcdClient() (*clientv3.Client, error) {
	return l.EtcdClientFor(l.Spec.ClientURLs()...)
}

// EtcdClientFor returns a client for the given client URLs only (with the
// lab's client cert when etcd serves TLS).
func (l *Lab) EtcdClientFor(endpoints ...string) (*clientv3.Client, error) {
	t, err := l.EtcdTLSConfig()
	if err != nil {
		return nil, err
	}
	return clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 3 * time.Second, TLS: t, Logger: zap.NewNop()})
}

// KubeClient returns a client-go clientset for the lab's API server.
func (l *Lab) KubeClient() (kubernetes.Interface, error) {
	cfg, err := l.RESTConfig()
	if err != nil {
		return nil, err
	}
	return kubernetes.NewForConfig(cfg)
}

// RESTConfig is the lab admin's client config.
func (l *Lab) RESTConfig() (*rest.Config, error) {
	if l.Spec.APIServer == nil {
		return nil, errors.New("this lab has no kube-apiserver")
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", l.Spec.APIServer.Kubeconfig)
	if err != nil {
		return nil, err
	}
	cfg.QPS, cfg.Burst = 200, 400
	return cfg, nil
}

// Down stops every process the lab started, by PID (supervisors stop their
// containers), and leaves the folder for inspection. It fails if any lab
// process is still running afterwards.
func (l *Lab) Down(ctx context.Context) error {
	var errs []error
	var controlPlane []*Process
	if m := l.Spec.Management; m != nil {
		controlPlane = append(controlPlane, m.ControllerManager, m.Scheduler)
	}
	if r := l.Spec.RealNode; r != nil {
		controlPlane = append(controlPlane, r.ControllerManager, r.Scheduler)
	}
	for _, p := range controlPlane {
		if p != nil {
			errs = append(errs, stopPID(p.PID, l.Spec.Dir, 15*time.Second))
		}
	}
	// The real node before the API server: its kubelet would otherwise
	// spend its stop retrying the API.
	errs = append(errs, l.downRealNode())
	if a := l.Spec.APIServer; a != nil {
		errs = append(errs, stopPID(a.PID, a.Dir, 15*time.Second))
	}
	for _, n := range l.Spec.Nodes {
		// The supervisor gives its containers SIGTERM and up to 10 s.
		errs = append(errs, stopPID(n.SupervisorPID, n.NodeDir, 15*time.Second))
	}
	// Containers whose supervisor died without stopping them (Pdeathsig
	// should have taken them) are stopped by the PIDs the supervisor published.
	for _, n := range l.Spec.Nodes {
		st, err := readSupervisorState(n)
		if err != nil {
			continue
		}
		for _, p := range st.Pods {
			for _, c := range p.Containers {
				errs = append(errs, stopPID(c.PID, l.Spec.Dir, 10*time.Second))
			}
		}
	}
	// The store last: the agents may be uploading until they stop.
	errs = append(errs, l.Spec.SnapshotStore.Stop())
	left := l.liveProcesses()
	if len(left) > 0 {
		errs = append(errs, fmt.Errorf("lab processes still running after down: %v", left))
	}
	if l.peers != nil {
		errs = append(errs, l.peers.close())
	}
	// The disks go last, once nothing runs on them.
	if len(l.Spec.DiskMounts) > 0 {
		errs = append(errs, l.unmountDisks(len(left) > 0))
	}
	return errors.Join(errs...)
}

// liveProcesses lists lab processes (etcd, kube-apiserver, etcd-agent) still running.
func (l *Lab) liveProcesses() []int { return labProcesses(l.Spec.Dir) }

// LiveProcesses is liveProcesses for tests and `lab status`.
func (l *Lab) LiveProcesses() []int { return l.liveProcesses() }
