// Package gate is the start gate: it holds etcd back from a data dir it
// must not start on (a wiped member under its old IDs, a stale copy, a
// foreign one), as etcd's wrapper or an init container, and leaves the
// stop watch (package faststop) beside the etcd it execs. What it decides is
// plan.DecideGate's; see docs/design.md §6, "Start gate".
package gate

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/journal"
	"github.com/etcd-agent/etcd-agent/internal/localdisk"
	"github.com/etcd-agent/etcd-agent/internal/manifest"
	"github.com/etcd-agent/etcd-agent/internal/memberruntime"
	"github.com/etcd-agent/etcd-agent/internal/pin"
	"github.com/etcd-agent/etcd-agent/internal/plan"
	"github.com/etcd-agent/etcd-agent/internal/record"
	"github.com/etcd-agent/etcd-agent/internal/watchdog"
	"go.uber.org/zap"
	"k8s.io/client-go/kubernetes"
)

// Config is what the gate is told: the member's overrides, where the
// agent keeps its state, and how to reach the cluster and the API (the
// agent's wiring fills these in from its flags: agent.Config.GateConfig).
type Config struct {
	StateDir string
	// StaticPodManifest: without an etcd command line to wrap, the member
	// is read from it (ResolveIdentity).
	StaticPodManifest string
	// Overrides of the member read from the etcd command line.
	MemberName, DataDir, WALDir, ClientURL string
	PeerURLs                               []string
	// TLS files the stop watch reaches etcd with.
	CACert, Cert, Key string
	// PodMember: the member is a pod served by an agent with
	// --member-source=pods (a first bootstrap waits for its word).
	PodMember    bool
	PollInterval time.Duration
	// NodeName and Kubeconfig: where the Node's pin is read from (none
	// without a node name, or out of a cluster without a kubeconfig).
	NodeName, Kubeconfig string
	Log                  *zap.Logger

	// ResolveIdentity is the member from the static-pod manifest and the
	// overrides (the gate as an init container).
	ResolveIdentity func() (watchdog.Identity, error)
	// NewWatchdog observes the cluster as the agent does.
	NewWatchdog func(id watchdog.Identity, pinned func() pin.Pin) (*watchdog.Watchdog, error)
	// KubeClient reaches the Kubernetes API.
	KubeClient func() (kubernetes.Interface, error)
}

// gateStillHoldingEvery is how often a holding gate says so again: a gate
// may wait for hours (a lost quorum), and silence looks like a hang.
const gateStillHoldingEvery = time.Minute

// Run blocks until plan.DecideGate lets etcd start (or ctx ends, or
// timeout, 0 = no limit). etcdArgv, when given, is the etcd command line the
// gate wraps (`gate [flags] -- etcd ...`): the member's identity is read
// from it, exactly what will run; the caller then execs it (ExecEtcd).
// Without it the identity comes from the static-pod manifest (the gate as
// an init container, which a container restart does not rerun).
//
// The pod runtime's files in --state-dir (memberruntime.HoldFile,
// StartFile) hold etcd while the agent has the member stopped, and give
// the flags a rejoin starts with; Run returns etcd's command line and
// environment with those flags set (etcdArgv and os.Environ() otherwise).
func Run(ctx context.Context, c Config, timeout time.Duration, etcdArgv []string) ([]string, []string, error) {
	if c.Log == nil {
		c.Log = zap.NewNop()
	}
	v, sf, boot, err := gateWaitFlags(ctx, c, timeout, etcdArgv)
	if err != nil {
		return nil, nil, err
	}
	return gateCommandLine(c, v, sf, boot, etcdArgv, os.Environ())
}

// gateCommandLine is what etcd runs after a pass: etcdArgv as judged, or
// with the start file's flags judged.
func gateCommandLine(c Config, v plan.GateVerdict, sf *memberruntime.StartFlags, boot bootstrapFlags, etcdArgv, environ []string) ([]string, []string, error) {
	switch {
	case v.ForcesNewCluster():
		return withForceNewCluster(c, v, etcdArgv, environ)
	case !v.StartsWithStartFlags():
		return etcdArgv, environ, nil
	case sf == nil && boot.bootstrap && len(etcdArgv) > 0:
		// The learner's flags were judged there and are gone now: never
		// run the bootstrap flags instead (a fresh cluster under old IDs).
		return nil, nil, fmt.Errorf("start gate: %s, but %s is gone or unreadable and etcd's own flags bootstrap a new cluster: not started", v.Reason, memberruntime.StartFile)
	case sf == nil:
		return etcdArgv, environ, nil
	}
	return withStartFlags(c, etcdArgv, environ, *sf)
}

// withStartFlags sets the rejoin flags judged (the pod runtime's, or a
// person's, in the state dir's start file) on etcd's command line (with
// data in the data dir etcd ignores them).
func withStartFlags(c Config, argv, environ []string, sf memberruntime.StartFlags) ([]string, []string, error) {
	if len(argv) == 0 {
		return argv, environ, nil
	}
	argv, environ, err := manifest.SetArgvFlags(argv, environ, map[string]string{
		"initial-cluster-state": sf.InitialClusterState, "initial-cluster": sf.InitialCluster})
	if err != nil {
		return nil, nil, fmt.Errorf("start gate: the rejoin flags: %w", err)
	}
	c.Log.Info("start gate: etcd starts with the rejoin flags of the start file", zap.String("initialCluster", sf.InitialCluster),
		zap.Time("writtenAt", sf.WrittenAt))
	return argv, environ, nil
}

// withForceNewCluster sets --force-new-cluster on etcd's command line for
// this one start, after setting the person's request aside (a restart of
// etcd passes the gate again without it: etcd must never be forced twice,
// which would drop every member added since).
func withForceNewCluster(c Config, v plan.GateVerdict, argv, environ []string) ([]string, []string, error) {
	argv, environ, err := manifest.SetArgvFlags(argv, environ, map[string]string{"force-new-cluster": "true"})
	if err != nil {
		return nil, nil, fmt.Errorf("start gate: --force-new-cluster: %w", err)
	}
	used, err := memberruntime.SetForceRequestAside(c.StateDir, "used", "", time.Now())
	if err != nil {
		return nil, nil, fmt.Errorf("start gate: not started: %w", err)
	}
	// The agent keeps the Lease past the mark's time only for a request
	// it sees used (matched by its content): a use set aside after that
	// time, or of a request rewritten since it was judged, is not one.
	notUsed := ""
	if now := time.Now(); now.After(v.Until) {
		notUsed = fmt.Sprintf("the request was set aside at %s, after its arm mark's time %s", now.UTC().Format(time.RFC3339Nano), v.Until.UTC().Format(time.RFC3339Nano))
	} else if r, err := memberruntime.ReadForceRequestAt(used); err != nil || !r.Is(v.Request) {
		notUsed = fmt.Sprintf("the request was rewritten after it was judged (%+v, %v)", r, err)
	}
	if notUsed != "" {
		if err := os.Rename(used, strings.Replace(used, ".used-", ".refused-", 1)); err != nil {
			return nil, nil, fmt.Errorf("start gate: not started: %s; %w", notUsed, err)
		}
		return nil, nil, fmt.Errorf("start gate: not started: %s: not used (etcd starts as judged at its next start)", notUsed)
	}
	c.Log.Warn("start gate: etcd starts ONCE with --force-new-cluster, as a person asked: a one-member cluster with this member's data",
		zap.String("request", used))
	return argv, environ, nil
}

// setForceRequestAside sets a request the gate will not use aside, so no
// later start reads it; a failure is said (the next look reads it again).
func setForceRequestAside(stateDir, outcome, why string, log *zap.Logger) {
	if _, err := memberruntime.SetForceRequestAside(stateDir, outcome, why, time.Now()); err != nil {
		log.Warn("start gate: "+err.Error(), zap.String("outcome", outcome))
	}
}

// Wait blocks until the gate passes (as Run) and says why it did.
func Wait(ctx context.Context, c Config, timeout time.Duration, etcdArgv []string) (plan.GateVerdict, error) {
	v, _, _, err := gateWaitFlags(ctx, c, timeout, etcdArgv)
	return v, err
}

// gateWaitFlags waits until the gate passes; with the verdict it returns
// the start file's flags read at that look (nil: none, or etcd runs
// without a command line to set them on) and etcd's own bootstrap flags.
func gateWaitFlags(ctx context.Context, c Config, timeout time.Duration, etcdArgv []string) (plan.GateVerdict, *memberruntime.StartFlags, bootstrapFlags, error) {
	id, boot, err := identity(c, etcdArgv)
	if err != nil {
		return plan.GateVerdict{}, nil, boot, err
	}
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	start := time.Now()
	log := c.Log.With(zap.String("member", id.Name), zap.String("dataDir", id.DataDir))
	nodePin := newNodePinReader(c, id.Name, log)
	var wd *watchdog.Watchdog
	defer func() {
		if wd != nil {
			wd.Close()
		}
	}()
	last, lastLogged := plan.GateVerdict{}, time.Time{}
	var unarmed armWait
	for {
		// The agent's word is read before the pin: it writes a pin it
		// adopts before its word, so a fresh word read first means the pin
		// read next is there if the record had one (unpinnedHold).
		var admission record.Admission
		var admissionErr error
		if c.PodMember {
			admission, admissionErr = pin.LoadAdmission(c.StateDir)
		}
		// The state dir's pin is read at every look: the agent may set a
		// member's dir aside meanwhile (a new claim: another member).
		p, ok, pinErr := pin.Load(c.StateDir, id.Name)
		if pinErr == nil && !ok {
			// Unreadable, the gate holds (pin-unreadable) and asks again.
			p, pinErr = nodePin.read(ctx, time.Now())
		}
		in := plan.GateInput{Pin: p, Bootstrap: boot.bootstrap, InitialClusterPeers: boot.peers}
		if pinErr != nil {
			in.PinError = pinErr.Error()
		}
		if c.PodMember {
			in.AdmissionRequired, in.Now, in.Admission = true, time.Now(), admission
			if admissionErr != nil {
				in.AdmissionError = admissionErr.Error()
			}
		}
		if h, held, err := memberruntime.ReadHold(c.StateDir); held {
			in.HeldByAgent = fmt.Sprintf("%s since %s", h.Reason, h.Since.Format(time.RFC3339))
			if err != nil {
				in.HeldByAgent = "its hold file cannot be read: " + err.Error()
			}
		}
		// The start file after the hold: the pod runtime writes it before
		// it removes the hold, so a look that finds no hold finds the file
		// (read first, a file written between the two reads was missed and
		// the learner's start failed). It counts only where the gate wraps
		// etcd (an init container cannot set flags on the etcd container).
		var judged *memberruntime.StartFlags
		if sf, ok, err := memberruntime.ReadStartFlags(c.StateDir); ok && len(etcdArgv) > 0 {
			judged, in.StartFlagsInitialCluster = &sf, sf.InitialCluster
		} else if err != nil && (last.Reason == "" || time.Since(lastLogged) >= gateStillHoldingEvery) {
			log.Warn("start gate: the start flags file cannot be used; etcd's own flags are judged", zap.Error(err))
		}
		// A person's --force-new-cluster request (the majority-lost
		// restore of a pod member): judged once the gate would pass on the
		// member's own data, with the cluster asked. Only where the gate
		// wraps etcd (it sets the flag on etcd's command line).
		var force *plan.ForceNewClusterRequest
		if fr, ok, err := memberruntime.ReadForceRequest(c.StateDir); ok && len(etcdArgv) > 0 && c.PodMember {
			if err != nil {
				log.Warn("start gate: the --force-new-cluster request cannot be read; set aside unused", zap.Error(err))
				setForceRequestAside(c.StateDir, "unreadable", err.Error(), log)
			} else {
				force = &fr
			}
		}
		r := localdisk.Classify(ctx, id.Dirs(), localdisk.Expect{ClusterID: uint64(p.ClusterID), HighWater: pin.HighWaterOf(p)})
		if ctx.Err() != nil {
			// An interrupted check proves nothing: never open on it.
			return plan.GateVerdict{}, nil, boot, fmt.Errorf("start gate: stopped while checking the data dir (still closed: %s: %s): %w", last.Reason, last.Detail, ctx.Err())
		}
		in.DataDirClass, in.DataDirDetail, in.DataDirMemberID, in.DataDirVerified = string(r.Class), r.Detail, r.MemberID, r.Verified
		j, _, err := journal.Load(c.StateDir, id.Name)
		if err != nil {
			return plan.GateVerdict{}, nil, boot, err
		}
		in.Journal = j
		// A healthy data dir of this member needs no cluster to pass; the
		// rest is judged with it (the first answer is then never used).
		in.Obs.MemberListError = "not asked"
		v := plan.DecideGate(in)
		asked := false
		if (force != nil && v.Pass) || !(v.Pass && r.Class == localdisk.ClassOK) && (r.Class == localdisk.ClassMissing || r.Class == localdisk.ClassEmpty || r.Class == localdisk.ClassOK) {
			// The answer depends on the cluster: ask it.
			if wd == nil {
				if wd, err = c.NewWatchdog(id, func() pin.Pin { return p }); err != nil {
					return plan.GateVerdict{}, nil, boot, err
				}
			}
			in.Obs = wd.Observe(ctx, time.Now())
			if in.AdmissionRequired {
				in.Now = time.Now() // the admission's age counts the observation's time
			}
			v, asked = plan.DecideGate(in), true
		}
		if force != nil && v.Pass {
			in.Now = time.Now()
			word := memberruntime.ReadAgentWord(c.StateDir)
			word.UnarmedSince = unarmed.sinceFor(*force)
			fv, err := plan.DecideForceNewCluster(in, v, *force, word, asked)
			if fv.WaitsForArm() && word.UnarmedSince.IsZero() {
				unarmed = armWait{req: *force, since: in.Now}
			}
			if err != nil {
				log.Warn("start gate: "+err.Error()+"; set aside, etcd starts as the gate judged", zap.String("reason", string(v.Reason)))
				setForceRequestAside(c.StateDir, "refused", err.Error(), log)
			}
			v = fv
		}
		if v.Pass && ctx.Err() != nil {
			return plan.GateVerdict{}, nil, boot, fmt.Errorf("start gate: stopped: %w", ctx.Err())
		}
		if v.Pass {
			log.Info("start gate open", zap.String("reason", string(v.Reason)), zap.String("detail", v.Detail), zap.String("pin", p.String()))
			return v, judged, boot, nil
		}
		if v != last || time.Since(lastLogged) >= gateStillHoldingEvery {
			log.Warn("start gate holds etcd back", zap.String("reason", string(v.Reason)), zap.String("detail", v.Detail),
				zap.String("class", string(r.Class)), zap.String("pin", p.String()), zap.Duration("heldFor", time.Since(start).Round(time.Second)))
			last, lastLogged = v, time.Now()
		}
		select {
		case <-ctx.Done():
			return plan.GateVerdict{}, nil, boot, fmt.Errorf("start gate: still closed (%s: %s): %w", v.Reason, v.Detail, ctx.Err())
		case <-time.After(c.PollInterval):
		}
	}
}

// bootstrapFlags: whether etcd's flags would bootstrap a new cluster, and
// from which peers (--initial-cluster).
type bootstrapFlags struct {
	bootstrap bool
	peers     []string
}

func bootstrapOf(m manifest.Member) bootstrapFlags {
	b := bootstrapFlags{bootstrap: m.InitialClusterState == "" || m.InitialClusterState == "new"}
	for _, kv := range strings.Split(m.InitialCluster, ",") {
		if _, u, ok := strings.Cut(strings.TrimSpace(kv), "="); ok && u != "" {
			b.peers = append(b.peers, u)
		}
	}
	return b
}

// identity is the member the gate guards, and what its flags would
// bootstrap.
func identity(c Config, etcdArgv []string) (watchdog.Identity, bootstrapFlags, error) {
	if len(etcdArgv) == 0 {
		if c.ResolveIdentity == nil {
			return watchdog.Identity{}, bootstrapFlags{}, errors.New("start gate: no etcd command line, and no static-pod manifest to read the member from")
		}
		id, err := c.ResolveIdentity()
		if err != nil {
			return id, bootstrapFlags{}, err
		}
		var b bootstrapFlags
		if m, err := manifest.LoadMember(c.StaticPodManifest); err == nil {
			b = bootstrapOf(m)
		}
		return id, b, nil
	}
	m, err := manifest.MemberFromArgv(etcdArgv, os.Environ())
	if err != nil {
		return watchdog.Identity{}, bootstrapFlags{}, fmt.Errorf("start gate: the etcd command line it wraps: %w", err)
	}
	id := watchdog.Identity{Name: m.Name, DataDir: m.DataDir, WALDir: m.WALDir, PeerURLs: m.PeerURLs}
	if len(m.ClientURLs) > 0 {
		id.ClientURL = m.ClientURLs[0]
	}
	if c.MemberName != "" {
		id.Name = c.MemberName
	}
	if c.DataDir != "" {
		id.DataDir = c.DataDir
	}
	if c.WALDir != "" {
		id.WALDir = c.WALDir
	}
	if c.ClientURL != "" {
		id.ClientURL = c.ClientURL
	}
	if len(c.PeerURLs) > 0 {
		id.PeerURLs = c.PeerURLs
	}
	if len(id.PeerURLs) == 0 || id.ClientURL == "" {
		return id, bootstrapFlags{}, errors.New("start gate: the etcd command line sets no --initial-advertise-peer-urls or --advertise-client-urls")
	}
	return id, bootstrapOf(m), nil
}

// ExecEtcd replaces this process with etcd (the gate as etcd's wrapper):
// same PID, so the kubelet (or the lab supervisor) sees etcd itself.
func ExecEtcd(argv, environ []string) error {
	path, err := exec.LookPath(argv[0])
	if err != nil {
		return fmt.Errorf("start gate: etcd binary: %w", err)
	}
	return syscall.Exec(path, argv, environ)
}
