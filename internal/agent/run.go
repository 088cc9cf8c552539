package agent

import (
	"context"
	"errors"
	"io/fs"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/controller/manifestkeeper"
	"github.com/etcd-agent/etcd-agent/internal/controller/mover"
	"github.com/etcd-agent/etcd-agent/internal/controller/steward"
	"github.com/etcd-agent/etcd-agent/internal/memberruntime"
	"github.com/etcd-agent/etcd-agent/internal/observation"

	"github.com/etcd-agent/etcd-agent/internal/heal"
	"github.com/etcd-agent/etcd-agent/internal/journal"
	"github.com/etcd-agent/etcd-agent/internal/manifest"
	"github.com/etcd-agent/etcd-agent/internal/memberstate"
	"github.com/etcd-agent/etcd-agent/internal/nodereport"
	"github.com/etcd-agent/etcd-agent/internal/plan"
	"github.com/etcd-agent/etcd-agent/internal/progress"
	"github.com/etcd-agent/etcd-agent/internal/watchdog"
	"github.com/etcd-agent/etcd-agent/metrics"
	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// StatusFile is where the daemon publishes its latest result in --state-dir.
const StatusFile = memberruntime.StatusFile

// Run is the daemon: observe, report, until ctx ends.
func Run(ctx context.Context, c Config) error {
	if err := c.Validate(); err != nil {
		return err
	}
	if c.Log == nil {
		c.Log = zap.NewNop()
	}
	if err := os.MkdirAll(c.StateDir, 0o755); err != nil {
		return err
	}
	unlock, err := lockStateDir(ctx, c.StateDir, stateLockWait, c.Log)
	if err != nil {
		return err
	}
	defer unlock()
	m := metrics.New()
	var ready atomic.Bool
	// The latest report, served at /status (static pods; pod members have
	// one status file each, which `status --member-source=pods` reads).
	var latest *atomic.Pointer[Report]
	if c.MemberSource != MemberSourcePods {
		latest = &atomic.Pointer[Report]{}
	}
	srv, err := serveHTTP(c.MetricsAddr, m, &ready, statusOf(latest, c), c.Profiling, c.Log)
	if err != nil {
		return err
	}
	defer srv.Shutdown(context.Background())
	if c.SnapshotStore != "" {
		defer c.startUploader(ctx)()
	}
	if c.MemberSource == MemberSourcePods {
		return runPods(ctx, c, m, &ready, srv.Addr)
	}
	kc, err := c.KubeClient(m)
	if err != nil {
		c.Log.Warn("no Kubernetes API: observing only; every recovery is refused (api-unavailable)", zap.Error(err))
		kc = nil
	}
	for {
		id, err := waitForIdentity(ctx, c)
		if err != nil {
			return err
		}
		if err := visibleOnNode(id, c.NodePaths); err != nil {
			return err
		}
		err = runMember(ctx, c, id, memberEnv{metrics: m, ready: &ready, kc: kc, metricsAddr: srv.Addr, node: true, latest: latest})
		if !errors.Is(err, errMemberRetired) && !errors.Is(err, errIdentityChanged) {
			return err
		}
		m.Forget(id.Name) // (as a pod member's worker does: no stale series)
	}
}

// memberEnv is what one member's loop shares with the rest of the agent.
type memberEnv struct {
	metrics     *metrics.Metrics // curried with the member's cluster
	ready       *atomic.Bool
	kc          kubernetes.Interface // nil: no API
	metricsAddr string
	// latest, when set, is where the reporter leaves every poll's report
	// for /status.
	latest *atomic.Pointer[Report]
	// node: the member is the node's own (static pod): manual requests,
	// Events, pins and last-recovery live on the Node.
	node bool
	// gateWrapped, when set, reports whether the member's etcd runs
	// through the start gate (pods); static pods read their manifest.
	gateWrapped func() bool
	// A pod member's reporting (Events, last-recovery) and manual requests
	// (the recover annotation) are on its pod: the caller provides them.
	podReporter *nodereport.Reporter
	requests    <-chan request
	// requestNow re-reads the request queued on requests (see nextRequest).
	requestNow func(context.Context) (request, bool)
	// pinRecord, for a pod member, is its cluster's record: its pin is
	// kept there, and its gate is told whether the cluster has served.
	pinRecord pinRecord
	// steward, for a pod member, acts for members of its cluster on lost
	// nodes (UC1) while this member is healthy.
	steward *steward.Steward
}

// runMember observes, decides and acts for one member until ctx ends.
func runMember(ctx context.Context, c Config, id watchdog.Identity, env memberEnv) error {
	// Everything started here (the request watch, the status writer)
	// ends with the member's loop, also when it moved away.
	ctx, cancelMember := context.WithCancel(ctx)
	defer cancelMember()
	m, kc := env.metrics, env.kc
	if err := os.MkdirAll(c.StateDir, 0o755); err != nil { // a pod member's own, under the agent's
		return err
	}
	log := c.Log.With(zap.String("member", id.Name), zap.String("node", c.NodeName))
	log.Info("agent started", zap.String("dataDir", id.DataDir), zap.Strings("peerURLs", id.PeerURLs),
		zap.String("clientURL", id.ClientURL), zap.String("metrics", env.metricsAddr), zap.Duration("poll", c.PollInterval),
		zap.Duration("grace", c.GracePeriod), zap.Bool("autoHeal", c.AutoHeal), zap.Bool("dryRun", c.DryRun))
	board := &progress.Board{} // the healer's long steps, read by the reporter
	rep := &reporter{log: log, metrics: m, member: id.Name, statusPath: filepath.Join(c.StateDir, StatusFile), where: c.where(id),
		progress: board, progressEvery: progressEvery, latest: env.latest}
	m.Init(id.Name, reasonStrings(), heal.TimedPhases)

	remote := env.pinRecord
	if env.node && kc != nil && c.NodeName != "" {
		remote = nodePins{kc: kc, node: c.NodeName}
	}
	pins, err := newPinner(ctx, c.StateDir, id.Name, remote, env.pinRecord != nil, log)
	if err != nil {
		return err
	}
	wd, err := c.NewWatchdog(id, pins.Current)
	if err != nil {
		return err
	}
	defer wd.Close()
	if wd.LoadError() != nil { // logged by the watchdog
		m.EndpointsFileErrors.WithLabelValues(id.Name).Inc()
	}
	nodeRep, requests, still := env.podReporter, env.requests, env.requestNow
	var moveTo atomic.Value // the Node's move-to annotation, from the watch ("" none)
	moveTo.Store("")
	var decommission atomic.Value // the Node's decommission annotation, from the watch (nil: not read)
	if kc != nil && c.NodeName != "" && env.node {
		nodeRep = nodereport.NewReporter(kc, c.NodeName, "etcd-agent", log)
		defer nodeRep.Shutdown()
		rep.node = startNodeStatus(ctx, nodeRep, log, statusRetryEvery)
		ch := make(chan request, 1)
		requests = ch
		still = func(ctx context.Context) (request, bool) { return nodeRequestNow(ctx, kc, c.NodeName) }
		go func() {
			err := nodereport.WatchNode(ctx, kc, c.NodeName, func(n *corev1.Node) {
				moveTo.Store(n.Annotations[nodereport.AnnotationMoveTo])
				_, decom := n.Annotations[nodereport.AnnotationDecommission]
				decommission.Store(decom)
				r, ok, err := nodereport.ParseRequest(n.Annotations)
				if !ok {
					return
				}
				select {
				case ch <- request{req: r, err: err}:
				default: // one pending request is enough; the annotation stays until handled
				}
			})
			if err != nil && ctx.Err() == nil {
				log.Error("watching the Node for recovery requests stopped", zap.Error(err))
			}
		}()
	}
	var healerRep heal.Reporter
	if nodeRep != nil {
		healerRep = nodeRep
	}
	var keeper *manifestkeeper.Keeper
	if env.node {
		if keeper = c.newManifestKeeper(id.Name, m, nodeRep, log); keeper != nil {
			keeper.OnAnswer(rep.manifestAnswer)
		}
	}
	watch := newLoopWatch(log, c.PollInterval, time.Now())
	step := func(name string) { watch.at(name, time.Now()) }
	pipe := &pipeline{wd: wd, assessor: memberstate.NewAssessor(c.GracePeriod), exporters: []exporter{rep}, pins: pins, watch: watch}
	h, err := c.newHealer(id, recoveryObserver{pipe}, kc, healerRep, m, board)
	if err != nil {
		return err
	}
	gate := gateCheck{c: c, log: log, m: m, member: id.Name, wrapped: env.gateWrapped}
	arm := c.newForceArm(id, kc, log)
	if arm != nil {
		defer arm.Close()
	}
	var skelRep eventer
	if nodeRep != nil {
		skelRep = nodeRep
	}
	skeleton := c.newSkeletonKeeper(id, m, skelRep, log)
	if env.steward != nil {
		env.steward.ObserveWith(func(ctx context.Context) memberstate.Result {
			r := pipe.assess(pipe.wd.Observe(ctx, time.Now()))
			pipe.exportAll(ctx, r, false)
			return r
		})
	}
	var mv *mover.Mover
	if env.node && kc != nil && c.NodeName != "" {
		mv = mover.New(mover.Config{Client: kc, Node: c.NodeName, StateDir: c.StateDir, Store: c.SnapshotStore, Timeout: 2 * c.RecoveryTimeout,
			Log: log, Rep: nodeRep, DryRun: c.DryRun, Requested: func() bool { return moveTo.Load().(string) != "" }})
	}
	var moveAt time.Time
	runCtx, stopRun := context.WithCancel(ctx)
	defer stopRun()
	retired := false
	retire := func() {
		retired = true
		if keeper != nil {
			keeper.Forget() // moved on purpose: never put back
		}
		log.Info("the member moved to another node: this agent no longer acts for it; waiting for a member on this node")
		stopRun()
	}
	identityChanged, identityErr := false, error(nil)
	go watch.run(runCtx)
	err = wd.Run(runCtx, func(o observation.Observation) {
		defer step(stepObserve)
		if env.node {
			step("identity check (the manifest)")
			// Before anything is judged on it: an observation made with
			// an identity the manifest no longer says (a --wal-dir added
			// by an operator) would read a healthy member as corrupt.
			why, err := identityDrift(c, id)
			if err != nil {
				log.Error("stopping: no action is taken on an identity the manifest no longer gives", zap.Error(err))
				identityErr = err
				stopRun()
				return
			}
			if why != "" {
				log.Info("the member's manifest says another identity: reading it again", zap.String("change", why))
				identityChanged = true
				stopRun()
				return
			}
		}
		step("export (status, Node, pin)")
		r := pipe.assess(o)
		pipe.exportAll(ctx, r, false)
		if v := r.Verdict; v.InGracePeriod() {
			// Judged lost when the grace period ends, not at the next poll.
			wd.WakeAt(v.TroubleSince.Add(c.GracePeriod + graceWakeSlack))
		}
		gate.check()
		if arm != nil {
			// Every poll, healthy too: a used request's Lease is let go
			// once the forced member serves with a quorum.
			step("force-new-cluster arm")
			arm.Consider(ctx, r)
		}
		env.ready.Store(true)
		var req *plan.Request
		step("manual request")
		if pending, ok := nextRequest(ctx, requests, still); ok {
			if pending.err != nil {
				badRequest(ctx, log, m, nodeRep, id.Name, pending.err)
				return
			}
			req = &plan.Request{Action: pending.req.Action, DryRun: pending.req.DryRun, Replaces: pending.req.Replaces, MoveFrom: pending.req.From, Target: pending.req.Target}
			log.Info("manual recovery requested", zap.String("action", req.Action), zap.Bool("dryRun", req.DryRun), zap.String("target", req.Target))
		}
		switch decideOn(r, req) {
		case nothingToDecide:
			return
		case observeAfresh: // a step may follow: decide on every member probed now
			step("observing afresh (watchdog)")
			r = pipe.assess(pipe.wd.Observe(ctx, time.Now()))
			pipe.exportAll(ctx, r, false)
		}
		// Before the healer: a member whose data dir was wiped while it
		// serves is kept from etcd's purge at once (the purge is at most
		// 30 s away); the healer may then replace it, which quarantines
		// the marked skeleton with the rest.
		step("healer")
		skeleton.consider(r.Observation)
		out := h.Consider(ctx, r, req)
		rep.decided(r, out.Decision)
		if out.Retired {
			retire()
			return
		}
		if mv != nil && req == nil && out.Result == "" && out.Decision.Action == plan.Nothing && time.Since(moveAt) >= movePace {
			moveAt = time.Now()
			step("mover")
			if mv.Consider(ctx, r, h) {
				retire()
				return
			}
		}
		// The keeper looks also while the healer refuses (manifest-missing,
		// majority-lost for a lone member): that is when it is needed.
		if keeper != nil && (out.Result == "" || out.Result == journal.ResultRefused) {
			step("manifest keeper")
			if d, ok := decommission.Load().(bool); ok {
				keeper.SetDecommissioned(d)
			}
			if keeper.Consider(r) {
				pipe.assessor.Restarted()
			}
		}
		if out.Result == "" {
			step("housekeeping (quarantine, steward)")
			h.Housekeep(r) // --quarantine-keep, on an observation no recovery acted on
			if env.steward != nil && req == nil {
				env.steward.Consider(ctx, r)
			}
		}
		if req != nil && out.Result == "" && !out.Answered && out.Err == nil {
			// Decide said "nothing to do" to a manual request: say so.
			// (An attempt stopped by shutdown or a lost Lease is not an
			// answer: its journal resumes, and answers the request then.)
			step("answering the request")
			reportNothing(ctx, log, nodeRep, req, out)
		}
		if out.Result != "" {
			log.Info("recovery outcome", zap.String("result", out.Result), zap.String("reason", string(out.Decision.Reason)), zap.Error(out.Err))
		}
	})
	if retired && ctx.Err() == nil {
		return errMemberRetired
	}
	if identityErr != nil && ctx.Err() == nil {
		return identityErr
	}
	if identityChanged && ctx.Err() == nil {
		return errIdentityChanged
	}
	return err
}

// graceWakeSlack: the grace period's end is observed this much after it
// (the tracker wants unhealthy-for >= grace on the sample's own clock).
const graceWakeSlack = 20 * time.Millisecond

// movePace spaces the mover's reads of the Nodes (a move waits on other
// agents: seconds matter, polls do not).
const movePace = 3 * time.Second

// errMemberRetired: the member moved to another node; the agent waits for
// a member on this node again.
var errMemberRetired = errors.New("the member moved to another node")

// errIdentityChanged: the manifest says another identity than the one the
// member's loop runs with (identityDrift); the agent reads it again.
var errIdentityChanged = errors.New("the member's identity changed")

// What a poll's result is good for: the healer, the quarantine prune and
// the steward see full observations only. A routine poll that reused the
// other members' last probe (observation.PeersReused) and shows a healthy
// member with no request has nothing to decide; one that shows anything
// else is followed by a full observation, which they decide on.
type useOfResult int

const (
	decideOnIt useOfResult = iota
	nothingToDecide
	observeAfresh
)

func decideOn(r memberstate.Result, req *plan.Request) useOfResult {
	switch {
	case !r.Observation.PeersReused:
		return decideOnIt
	case req == nil && r.Verdict.State == memberstate.Healthy:
		return nothingToDecide
	default:
		return observeAfresh
	}
}

// nextRequest takes a manual request the watch queued, as the annotations
// say it now (reread): the queued copy may predate a change (a dry run, then
// the real request; another target), and it may have been answered already
// (the watch queues every update while the trigger is on).
func nextRequest(ctx context.Context, queued <-chan request, reread func(context.Context) (request, bool)) (request, bool) {
	select {
	case <-queued:
		return reread(ctx)
	default:
		return request{}, false
	}
}

// nodeRequestNow re-reads the Node's request: acted on only while its
// trigger annotation is there, and as it is now.
func nodeRequestNow(ctx context.Context, kc kubernetes.Interface, node string) (request, bool) {
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	n, err := kc.CoreV1().Nodes().Get(rctx, node, metav1.GetOptions{})
	if err != nil {
		return request{}, false
	}
	r, ok, err := nodereport.ParseRequest(n.Annotations)
	return request{req: r, err: err}, ok
}

type request struct {
	req nodereport.Request
	err error
}

func reasonStrings() []string {
	var out []string
	for _, r := range plan.RefusalReasons() {
		out = append(out, string(r))
	}
	return out
}

// badRequest: an annotation value that is not understood is refused with
// reason bad-request, and nothing else changes.
func badRequest(ctx context.Context, log *zap.Logger, m *metrics.Metrics, rep *nodereport.Reporter, member string, err error) {
	log.Warn("recovery request refused", zap.String("reason", string(plan.ReasonBadRequest)), zap.Error(err))
	m.RefusalsTotal.WithLabelValues(member, string(plan.ReasonBadRequest)).Inc()
	if rep == nil {
		return
	}
	rep.Eventf("Warning", nodereport.ReasonRecoveryRefused, "%s: %v", plan.ReasonBadRequest, err)
	answerRefused(ctx, log, rep, nodereport.Refusal("invalid", string(plan.ReasonBadRequest), err.Error(), time.Now()))
}

// reportNothing answers a manual request that needed no action (e.g. the
// member is healthy and no recovery was due) so the SRE is not left waiting.
func reportNothing(ctx context.Context, log *zap.Logger, rep *nodereport.Reporter, req *plan.Request, out heal.Outcome) {
	if rep == nil {
		return
	}
	answerRefused(ctx, log, rep, nodereport.Refusal(req.Action, string(out.Decision.Reason), out.Decision.Detail, time.Now()))
}

// answerRefused answers a request the agent refuses before the healer sees
// it: the trigger is cleared (a failure is logged; the trigger stays and is
// handled again at the next poll) and last-recovery says why.
func answerRefused(ctx context.Context, log *zap.Logger, rep *nodereport.Reporter, lr nodereport.LastRecovery) {
	if err := rep.ClearRequest(ctx); err != nil {
		log.Warn("clearing the answered recovery request failed; the trigger stays and is handled again at the next poll", zap.Error(err))
	}
	_ = nodereport.WriteLastRecovery(ctx, rep, log, lr)
}

// waitForIdentity resolves the member's identity, waiting while the etcd
// static-pod manifest does not exist yet: a DaemonSet pod on a control-plane
// node that has no member (yet: a new node, UC1) idles, live but not ready,
// instead of crash-looping. Any other identity error is fatal.
func waitForIdentity(ctx context.Context, c Config) (watchdog.Identity, error) {
	logged := false
	for {
		id, err := ResolveIdentity(c)
		if err == nil || !errors.Is(err, fs.ErrNotExist) {
			return id, err
		}
		if !logged {
			c.Log.Warn("no etcd static-pod manifest on this node yet; waiting for one", zap.String("manifest", c.StaticPodManifest), zap.Error(err))
			logged = true
		}
		select {
		case <-ctx.Done():
			return id, ctx.Err()
		case <-time.After(c.PollInterval):
		}
	}
}

// serveHTTP serves /metrics, /healthz (the process lives), /readyz (it
// has completed an observation) and /status (the latest poll's report:
// what `status --cluster` asks every node's agent when the majority is
// lost, and the Kubernetes API with it).
func serveHTTP(addr string, m *metrics.Metrics, ready *atomic.Bool, status *statusHandler, profiling bool, log *zap.Logger) (*http.Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	return serveOn(ln, m, ready, status, profiling, log), nil
}

// statusOf is /status's handler: the latest report (static pods), or each
// pod member's from its status file (latest nil).
func statusOf(latest *atomic.Pointer[Report], c Config) *statusHandler {
	log := c.Log
	if log == nil {
		log = zap.NewNop()
	}
	h := &statusHandler{latest: latest, busy: make(chan struct{}, 1), hasher: newDBHasher(filepath.Join(c.StateDir, hashScratchDir), log)}
	if latest == nil {
		h.podsStateDir = c.StateDir
	}
	return h
}

// serveOn serves serveHTTP's endpoints on ln (and, with profiling, Go's
// /debug/pprof/, as Kubernetes components do with --profiling); the
// server's errors go to log.
func serveOn(ln net.Listener, m *metrics.Metrics, ready *atomic.Bool, status *statusHandler, profiling bool, log *zap.Logger) *http.Server {
	mux := http.NewServeMux()
	if profiling {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	}
	mux.Handle("/metrics", m.Handler())
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte("ok\n")) })
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !ready.Load() {
			http.Error(w, "no observation yet", http.StatusServiceUnavailable)
			return
		}
		w.Write([]byte("ok\n"))
	})
	if status != nil {
		mux.Handle("/status", status)
	}
	srv := &http.Server{Addr: ln.Addr().String(), Handler: mux, ReadHeaderTimeout: 5 * time.Second,
		ErrorLog: zap.NewStdLog(log.Named("http"))}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("metrics server stopped: /metrics, /healthz and /readyz no longer answer", zap.String("addr", srv.Addr), zap.Error(err))
		}
	}()
	return srv
}

// gateCheck reports whether the etcd static pod runs etcd through the start
// gate: without it a container restart starts etcd unchecked (kubelet does
// not rerun init containers), and a manifest regenerated by an upgrade
// (kubeadm upgrade) loses the wrapper. Said once per change, and as a metric.
type gateCheck struct {
	c      Config
	log    *zap.Logger
	m      *metrics.Metrics
	member string
	// wrapped answers for a pod member (nil: read the static-pod manifest).
	wrapped   func() bool
	known     bool
	isWrapped bool
}

func (g *gateCheck) check() {
	var wrapped bool
	switch {
	case g.wrapped != nil:
		wrapped = g.wrapped()
	case g.c.MemberRuntime == "exec" || g.c.StaticPodManifest == "":
		return
	default:
		mf, err := manifest.LoadMember(g.c.StaticPodManifest)
		if err != nil {
			return // parked while the member is stopped: keep the last answer
		}
		wrapped = mf.GateWrapped
	}
	g.m.StartGateWrapped.WithLabelValues(g.member).Set(metrics.Bool(wrapped))
	if g.known && g.isWrapped == wrapped {
		return
	}
	g.known, g.isWrapped = true, wrapped
	if !wrapped {
		g.log.Warn("etcd does not run through the start gate: a container restart can start etcd on a lost data dir under its old member ID; wrap it (docs/recovery.md, \"The start gate\")",
			zap.String("manifest", g.c.StaticPodManifest))
		return
	}
	g.log.Info("etcd runs through the start gate")
}
