package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/lab"
	"github.com/etcd-agent/etcd-agent/internal/lab/supervisor"
	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// defaultBinDir is the folder of this executable when it holds etcd (the
// repo's bin/ after `make`), else ./bin.
func defaultBinDir() string {
	if exe, err := os.Executable(); err == nil {
		dir := filepath.Dir(exe)
		if _, err := os.Stat(filepath.Join(dir, "etcd")); err == nil {
			return dir
		}
	}
	abs, _ := filepath.Abs("bin")
	return abs
}

func newLabCmd(g *globalFlags) *cobra.Command {
	var dir string
	cmd := &cobra.Command{Use: "lab", Short: "Run a local etcd + kube-apiserver control plane (and a real kubelet node) to demo and test etcd-agent"}
	cmd.PersistentFlags().StringVar(&dir, "dir", "lab", "the lab's folder")
	open := func() (*lab.Lab, error) {
		log, err := g.logger()
		if err != nil {
			return nil, err
		}
		return lab.Open(dir, log)
	}
	cmd.AddCommand(newLabUpCmd(g, &dir), newLabDownCmd(open), newLabStatusCmd(open), newLabSuperviseCmd(g), newLabRealNodeCmd(g), newLabDemoCmd(g, &dir), newLabBenchCmd(g, &dir), newLabBenchScaleCmd(g, &dir))
	cmd.AddCommand(newLabFaultCmds(open)...)
	return cmd
}

func newLabUpCmd(g *globalFlags, dir *string) *cobra.Command {
	o := lab.Options{}
	var diskLimit, mode, etcdVersion string
	var etcdVersions []string
	c := &cobra.Command{
		Use:   "up",
		Short: "Create the lab's nodes, start etcd under each node's supervisor, then kube-apiserver",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := g.logger()
			if err != nil {
				return err
			}
			o.Dir, o.Log = *dir, log
			switch mode {
			case "static-pod":
			case "management":
				o.Management = true
			default:
				return fmt.Errorf("--mode %q: want static-pod or management", mode)
			}
			if diskLimit != "" {
				q, err := resource.ParseQuantity(diskLimit)
				if err != nil {
					return fmt.Errorf("--disk-limit: %w", err)
				}
				o.DiskLimit = q.Value()
			}
			if o.AgentBinary == "" {
				if o.AgentBinary, err = agentBinary(); err != nil {
					return err
				}
			}
			if o.LabBinary, err = os.Executable(); err != nil {
				return err
			}
			if o.BinDir, err = filepath.Abs(o.BinDir); err != nil {
				return err
			}
			if err := etcdVersionFlags(&o, etcdVersion, etcdVersions); err != nil {
				return err
			}
			start := time.Now()
			l, err := lab.Up(cmd.Context(), o)
			if err != nil {
				return fmt.Errorf("lab up: %w (stop what started with `etcd-agent-lab down --dir %s`)", err, *dir)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "lab up in %s (%.1fs)\n\n", l.Spec.Dir, time.Since(start).Seconds())
			if ok, why := l.DiskFaultsAvailable(); o.DiskLimit > 0 && !ok {
				fmt.Fprintf(cmd.OutOrStdout(), "disk faults unavailable: %s\n\n", why)
			}
			printStatus(cmd, l, l.Status(cmd.Context()))
			printHowToReach(cmd, l)
			return nil
		},
	}
	c.Flags().StringVar(&mode, "mode", "static-pod", "static-pod: a control plane of etcd static pods; management: worker nodes with lab kubelets, the real controller-manager and scheduler, local PVs and hosted etcd StatefulSets (docs/management-lab.md)")
	c.Flags().IntVar(&o.Nodes, "nodes", 3, "number of nodes (etcd members; with --mode management, worker nodes)")
	c.Flags().IntVar(&o.HostedClusters, "hosted-clusters", 2, "with --mode management: hosted etcd clusters (namespaces clusters-a, clusters-b, ...)")
	c.Flags().IntVar(&o.PVsPerNode, "pvs-per-node", 0, "with --mode management: local PVs per worker (0: one more than --hosted-clusters, at least 3)")
	c.Flags().StringVar(&o.BinDir, "bin-dir", defaultBinDir(), "folder with etcd, etcdctl, kube-apiserver (from `make tools`)")
	c.Flags().StringVar(&o.AgentBinary, "agent-binary", "", "etcd-agent binary for the gates and agents (default: etcd-agent beside this executable)")
	c.Flags().BoolVar(&o.NoAPIServer, "no-apiserver", false, "do not start kube-apiserver")
	c.Flags().BoolVar(&o.Agents, "agents", false, "run `etcd-agent run` on every node")
	c.Flags().StringVar(&o.EtcdBinary, "etcd-binary", "", "etcd binary for the members (default: <bin-dir>/etcd; make tools also builds bin/etcd-3.7)")
	c.Flags().StringVar(&etcdVersion, "etcd-version", "", "etcd minor version of every member: 3.5, 3.6 or 3.7 (<bin-dir>/etcd-3.5, etcd, etcd-3.7); instead of --etcd-binary")
	c.Flags().StringSliceVar(&etcdVersions, "etcd-versions", nil, "etcd minor version per node, e.g. 3.5,3.5,3.6 (node1 first; a node not listed runs --etcd-version or --etcd-binary): a mixed-version cluster, as during a rolling upgrade")
	c.Flags().BoolVar(&o.EtcdTLS, "etcd-tls", false, "etcd serves client and peer TLS with client cert auth, as on kubeadm (certs in <dir>/pki/etcd)")
	c.Flags().BoolVar(&o.RealNode, "real-node", false, "the last node is a real one: the real kubelet, containerd and runc in namespaces of its own (needs root, --etcd-tls, `make tools images`)")
	c.Flags().BoolVar(&o.EtcdWALDir, "etcd-wal-dir", false, "members run with a dedicated --wal-dir (<node>/disk/wal/etcd), as a WAL on its own disk")
	c.Flags().StringArrayVar(&o.AgentArgs, "agent-arg", nil, "extra flag for every agent (repeatable)")
	c.Flags().StringVar(&o.SnapshotStore, "snapshot-store", "", "give the agents a --snapshot-store: file (a lab folder, as a shared filesystem) or s3 (a real S3 server: SeaweedFS weed mini, built by make tools); the URL and credentials are in <dir>/lab.json")
	c.Flags().StringVar(&diskLimit, "disk-limit", "", "make each node's disk a tmpfs of this size (e.g. 256Mi; needs root) for fill-disk; `down` unmounts them")
	// No --peer-proxy: the peer proxies live in the process that brought the
	// lab up, and this command exits (see internal/lab/peerproxy.go).
	return c
}

// etcdVersionFlags turns --etcd-version and --etcd-versions into o's etcd
// binaries (both after o.BinDir is absolute).
func etcdVersionFlags(o *lab.Options, version string, perNode []string) error {
	if version != "" {
		if o.EtcdBinary != "" {
			return fmt.Errorf("--etcd-version and --etcd-binary: give one")
		}
		b, err := lab.EtcdBinaryForVersion(o.BinDir, version)
		if err != nil {
			return fmt.Errorf("--etcd-version: %w", err)
		}
		o.EtcdBinary = b
	}
	if len(perNode) > o.Nodes {
		return fmt.Errorf("--etcd-versions lists %d versions for %d nodes", len(perNode), o.Nodes)
	}
	for _, v := range perNode {
		b, err := lab.EtcdBinaryForVersion(o.BinDir, strings.TrimSpace(v))
		if err != nil {
			return fmt.Errorf("--etcd-versions: %w", err)
		}
		o.EtcdBinaries = append(o.EtcdBinaries, b)
	}
	return nil
}

func printHowToReach(cmd *cobra.Command, l *lab.Lab) {
	w := cmd.OutOrStdout()
	tlsFlags := ""
	if t := l.Spec.EtcdTLS; t != nil {
		tlsFlags = fmt.Sprintf(" --cacert=%s --cert=%s --key=%s", t.CAFile, t.ClientCert, t.ClientKey)
	}
	fmt.Fprintf(w, "\netcd:  %s/etcdctl --endpoints=%s%s member list -w table\n", l.Spec.BinDir, joinComma(l.Spec.ClientURLs()), tlsFlags)
	if a := l.Spec.APIServer; a != nil {
		fmt.Fprintf(w, "API:   %s  (kubeconfig %s)\n", a.URL, a.Kubeconfig)
		fmt.Fprintf(w, "       curl --cacert %s/pki/ca.crt -H 'Authorization: Bearer %s' %s/apis/coordination.k8s.io/v1/namespaces/%s/leases\n",
			a.Dir, a.Token, a.URL, lab.AgentNamespace)
	}
	fmt.Fprintf(w, "lab:   %s/lab.json; stop with: etcd-agent-lab down --dir %s\n", l.Spec.Dir, l.Spec.Dir)
}

func joinComma(s []string) string {
	out := ""
	for i, v := range s {
		if i > 0 {
			out += ","
		}
		out += v
	}
	return out
}

func newLabDownCmd(open func() (*lab.Lab, error)) *cobra.Command {
	return &cobra.Command{
		Use:   "down",
		Short: "Stop every process the lab started (by PID); keep its folder",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			l, err := open()
			if err != nil {
				return err
			}
			if err := l.Down(cmd.Context()); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "lab in %s stopped; no lab process left; files kept\n", l.Spec.Dir)
			return nil
		},
	}
}

func newLabStatusCmd(open func() (*lab.Lab, error)) *cobra.Command {
	var output string
	c := &cobra.Command{
		Use:   "status",
		Short: "Show the lab's members, their health, the leader and whether the API is ready",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			l, err := open()
			if err != nil {
				return err
			}
			st := l.Status(cmd.Context())
			if output == "json" {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				return enc.Encode(st)
			}
			printStatus(cmd, l, st)
			return nil
		},
	}
	c.Flags().StringVarP(&output, "output", "o", "table", "table or json")
	return c
}

func printStatus(cmd *cobra.Command, l *lab.Lab, st lab.Status) {
	w := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "NODE\tMEMBER\tID\tROLE\tLEADER\tHEALTHY\tAPPLIED\tCLIENT URL\tERROR")
	for _, m := range st.Members {
		role := "voter"
		if m.Learner {
			role = "learner"
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%v\t%v\t%d\t%s\t%s\n", m.Node, m.Name, m.ID, role, m.Leader, m.Healthy, m.AppliedIndex, m.ClientURL, m.Error)
	}
	w.Flush()
	voters, healthy := st.Healthy()
	fmt.Fprintf(cmd.OutOrStdout(), "voters %d, healthy %d, leader %s", voters, healthy, st.LeaderID)
	if st.MemberList != "" {
		fmt.Fprintf(cmd.OutOrStdout(), ", member list failed: %s", st.MemberList)
	}
	if l.Spec.APIServer != nil {
		fmt.Fprintf(cmd.OutOrStdout(), ", API ready %v %s", st.APIReady, st.APIError)
	}
	fmt.Fprintln(cmd.OutOrStdout())
	printManagementStatus(cmd, st)
}

func newLabSuperviseCmd(g *globalFlags) *cobra.Command {
	var nodeDir, kubeconfig, nodeName, nodeIP, salt string
	var nodeLabels map[string]string
	var heartbeat time.Duration
	c := &cobra.Command{
		Use:    "supervise",
		Short:  "Run a lab node's static pods like a kubelet, and with --kubeconfig its API pods too (started by `up`)",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := g.logger()
			if err != nil {
				return err
			}
			cfg := supervisor.Config{
				ManifestsDir: filepath.Join(nodeDir, "manifests"), LogsDir: filepath.Join(nodeDir, "logs"),
				StateFile: filepath.Join(nodeDir, "supervisor.json"), Log: log.With(),
			}
			if kubeconfig != "" {
				rc, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
				if err != nil {
					return err
				}
				kc, err := kubernetes.NewForConfig(rc)
				if err != nil {
					return err
				}
				cfg.Kubelet = &supervisor.KubeletConfig{Client: kc, NodeName: nodeName, NodeIP: nodeIP, NodeLabels: nodeLabels,
					PodIPSalt: salt, Heartbeat: heartbeat, PodsDir: filepath.Join(nodeDir, "pods")}
			}
			s, err := supervisor.New(cfg)
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
			defer stop()
			return s.Run(ctx)
		},
	}
	c.Flags().StringVar(&nodeDir, "node-dir", "", "the node's folder")
	c.Flags().StringVar(&kubeconfig, "kubeconfig", "", "be this node's lab kubelet too: register the Node and run the API pods bound to it")
	c.Flags().StringVar(&nodeName, "node-name", "", "the Node's name (with --kubeconfig)")
	c.Flags().StringVar(&nodeIP, "node-ip", "", "the Node's InternalIP (with --kubeconfig)")
	c.Flags().StringVar(&salt, "pod-ip-salt", "", "salt of the per-pod loopback IPs, so that labs on one machine differ")
	c.Flags().StringToStringVar(&nodeLabels, "node-labels", nil, "extra labels of the Node")
	c.Flags().DurationVar(&heartbeat, "heartbeat", 5*time.Second, "how often Node status and the node Lease are renewed")
	_ = c.MarkFlagRequired("node-dir")
	return c
}
