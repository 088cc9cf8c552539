// Package watchdog observes the local etcd member: its data dir (fsnotify for
// instant events plus a periodic deep check), its own health over its client
// URL, and the cluster's membership and per-member health. Each poll yields a
// timestamped observation.Observation and the member's state with hysteresis
// (package memberstate). It changes nothing.
package watchdog

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/localdisk"
	"github.com/etcd-agent/etcd-agent/internal/observation"
	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.uber.org/zap"
)

// Identity is who the local member is (from the static-pod manifest, with
// flag overrides).
type Identity struct {
	Name      string
	PeerURLs  []string
	ClientURL string
	// DataDir is the data dir's path on this node (the host side of the
	// static pod's mount).
	DataDir string
	// WALDir is the dedicated --wal-dir's path on this node, "" when the
	// WAL is in the data dir's member/wal.
	WALDir string
	// WALDirMountRoot: a volume is mounted right at the WAL dir in etcd's
	// container (a mount point there, whatever the host shows).
	WALDirMountRoot bool
	// DataDirMountRoot: a volume is mounted right at the data dir in etcd's
	// container (kubeadm's hostPath at --data-dir, a claim mounted at it):
	// once that dir is removed on the node, etcd's container keeps the
	// removed dir, and a dir made again at its path is not what etcd sees.
	DataDirMountRoot bool
	// EnableV2: the manifest turns on etcd 3.5's v2 API (--enable-v2).
	EnableV2 bool
}

// Dirs is where the member's data dir and WAL are on this node.
func (id Identity) Dirs() localdisk.Dirs { return localdisk.Dirs{Data: id.DataDir, WAL: id.WALDir} }

// Config configures a Watchdog.
type Config struct {
	Identity Identity
	// Endpoints are other members' client URLs to reach the cluster when the
	// local member is down; the watchdog adds every client URL it learns.
	Endpoints    []string
	TLS          *tls.Config
	PollInterval time.Duration
	GracePeriod  time.Duration
	// ProbeTimeout bounds each request to a member.
	ProbeTimeout time.Duration
	// EndpointsFile persists learned client URLs across agent restarts.
	EndpointsFile string
	// PinnedClusterID returns the cluster ID pinned for this member (the
	// pin store); nil or 0 means none yet: the first member list's cluster
	// is adopted, and kept for the life of the process.
	PinnedClusterID func() uint64
	// PinnedHighWater, when set, returns the progress the pinned member was
	// seen to keep: its data dir behind it is stale (a restored volume).
	PinnedHighWater func() localdisk.HighWater
	Log             *zap.Logger
	// Slots, when set, is a counting semaphore shared by many watchdogs
	// (one agent serving many members): an observation takes a slot for
	// its probes, so at most cap(Slots) members are probed at once.
	Slots chan struct{}
	// PeerProbeEvery, when set, lets a routine poll (Run) reuse the other
	// members' last probe for this long while nothing is amiss (see
	// quickObserve); Observe always probes every member.
	PeerProbeEvery time.Duration
}

// Watchdog observes; Observe is one poll, Run polls until its context ends.
type Watchdog struct {
	cfg Config
	// observeHook, when set, runs at the start of each observation (tests).
	observeHook func()
	clients     *clients
	deep        deepCache
	layout      localdisk.LayoutCache
	live        *liveness
	// running: Run polls; only then are liveness streams kept (a one-shot
	// observation, `status` or the gate, has no routine poll to spare).
	running atomic.Bool
	// nextTick is the wait until Run's next poll (tests: far away).
	nextTick func(now time.Time) time.Duration

	// wakeAt is an observation Run owes before its next poll (WakeAt).
	wakeAt time.Time

	mu        sync.Mutex
	endpoints []string
	clusterID uint64
	// lastPollTook is how long the last Observe took (see maxSampleGap).
	lastPollTook time.Duration
	// gap is SampleGap for the last observation.
	gap time.Duration
	// lastMembers is the last member list seen: when no member answers the
	// list (no leader), the members it named are still probed one by one,
	// so that a lost majority is reported with real counts.
	lastMembers []observation.Member
	// peers is the last full probe of every member, for routine polls.
	peers peerProbe
	// liveErr: the last failure to open liveness streams that was logged.
	liveErr string
	// loadErr: the learned endpoints file could not be read at start;
	// corruptAside: it is corrupt and is kept aside before the first write.
	loadErr      error
	corruptAside bool
}

// New checks cfg and returns a Watchdog.
func New(cfg Config) (*Watchdog, error) {
	if cfg.Identity.Name == "" || len(cfg.Identity.PeerURLs) == 0 || cfg.Identity.DataDir == "" {
		return nil, fmt.Errorf("watchdog: the local member's name, peer URL and data dir are required")
	}
	if cfg.PollInterval <= 0 {
		cfg.PollInterval = 5 * time.Second
	}
	if cfg.ProbeTimeout <= 0 {
		cfg.ProbeTimeout = min(cfg.PollInterval, 3*time.Second)
	}
	if cfg.Log == nil {
		cfg.Log = zap.NewNop()
	}
	w := &Watchdog{cfg: cfg, clients: newClients(cfg.TLS, cfg.ProbeTimeout), live: newLiveness(), deep: newDeepCache(cfg.Log)}
	if ka := cfg.PeerProbeEvery / 2; ka > w.clients.keepAlive {
		// Each ping is a wakeup per connection: a member that hangs (or a
		// path that drops packets) ends its liveness stream within half the
		// reuse, and the timeout.
		w.clients.keepAlive = ka
	}
	learned, err := loadEndpoints(cfg.EndpointsFile)
	if err != nil {
		cfg.Log.Error("learned endpoints unreadable; using the configured ones until a member list answers (a corrupt file is kept aside before it is rewritten)",
			zap.String("file", cfg.EndpointsFile), zap.Error(err))
		w.loadErr, w.corruptAside = err, errors.Is(err, errCorruptEndpoints)
	}
	w.endpoints = uniq(append(append([]string{cfg.Identity.ClientURL}, cfg.Endpoints...), learned...))
	return w, nil
}

// Close releases the etcd clients.
func (w *Watchdog) Close() {
	w.deep.close()
	w.live.close()
	w.clients.close()
}

// Observe makes one observation at now. What it means for the member
// (its state, the learners' clocks) is the agent's to assess
// (memberstate.Assessor), with SampleGap.
func (w *Watchdog) Observe(ctx context.Context, now time.Time) observation.Observation {
	return w.observeTimed(ctx, now, false)
}

func (w *Watchdog) observeTimed(ctx context.Context, now time.Time, routine bool) observation.Observation {
	start := time.Now()
	if w.cfg.Slots != nil {
		select {
		case w.cfg.Slots <- struct{}{}:
			defer func() { <-w.cfg.Slots }()
		case <-ctx.Done(): // the probes below fail at once on ctx
		}
	}
	obs := w.observe(ctx, now, routine)
	w.mu.Lock()
	w.gap = w.maxSampleGap()
	w.lastPollTook = time.Since(start)
	w.mu.Unlock()
	return obs
}

// SampleGap is how far the last observation may lie from the one before it
// and still continue its unhealthy run (memberstate.Config.MaxSampleGap).
func (w *Watchdog) SampleGap() time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.gap
}

// maxSampleGap is how far apart two samples may be and still count as one
// continuous unhealthy run: three poll intervals of not looking (a stalled
// agent, a recovery held or slow before its re-check) mean the member may
// have been healthy unseen, so the run starts afresh. A sample's time is its
// poll's start, so the gap also holds the previous poll's own duration,
// which is added: a poll is slow when members do not answer (each request
// waits ProbeTimeout, and the member list and alarms try endpoints one after
// another), and a fixed limit would then restart the run on every poll and
// never let the member be lost.
func (w *Watchdog) maxSampleGap() time.Duration {
	return 3*w.cfg.PollInterval + w.lastPollTook
}

func (w *Watchdog) observe(ctx context.Context, now time.Time, routine bool) observation.Observation {
	if w.observeHook != nil {
		w.observeHook()
	}
	id := w.cfg.Identity
	obs := observation.Observation{At: now, Local: observation.Local{Name: id.Name, PeerURLs: id.PeerURLs,
		ClientURL: id.ClientURL, DataDir: id.DataDir, WALDir: id.WALDir}}
	w.mu.Lock()
	eps := slices.Clone(w.endpoints)
	w.mu.Unlock()
	pin := w.pin()
	obs.PinnedClusterID = pin
	if f := w.cfg.PinnedClusterID; f != nil {
		obs.ClusterPinned = f() != 0
	}
	if routine {
		// A reused probe is only ever a healthy member's: a data dir that
		// is not usable makes it a full observation (one sample, every
		// member probed), which the agent then decides on.
		if q, ok := w.quickObserve(now, obs); ok {
			if w.classifyDataDir(ctx, &q, true); observation.DataDirUsable(q.Local.DataDirClass) {
				return q
			}
		}
	}
	var foreign []string
	resp, listEP, err := w.clients.memberList(ctx, eps, true, pin, &foreign)
	if err != nil {
		obs.MemberListError = err.Error()
		obs.ClusterID = pin
		w.mu.Lock()
		for _, m := range w.lastMembers {
			obs.Members = append(obs.Members, observation.Member{ID: m.ID, Name: m.Name,
				PeerURLs: m.PeerURLs, ClientURLs: m.ClientURLs, IsLearner: m.IsLearner})
		}
		w.mu.Unlock()
		if len(obs.Members) == 0 {
			// Never saw a list (a one-shot status): any member's own,
			// possibly stale, view is better than none for counting.
			if stale, _, err := w.clients.memberList(ctx, eps, false, pin, &foreign); err == nil {
				obs.ClusterID = stale.Header.ClusterId
				for _, m := range stale.Members {
					obs.Members = append(obs.Members, observation.Member{ID: m.ID, Name: m.Name,
						PeerURLs: m.PeerURLs, ClientURLs: m.ClientURLs, IsLearner: m.IsLearner})
				}
			}
		}
	} else {
		obs.ClusterID = resp.Header.ClusterId
		for _, m := range resp.Members {
			obs.Members = append(obs.Members, observation.Member{ID: m.ID, Name: m.Name,
				PeerURLs: m.PeerURLs, ClientURLs: m.ClientURLs, IsLearner: m.IsLearner})
		}
		sort.Slice(obs.Members, func(i, j int) bool { return obs.Members[i].Name < obs.Members[j].Name })
		w.learnEndpoints(obs.Members, obs.ClusterID)
		obs.PinnedClusterID = w.pin()
		w.mu.Lock()
		w.lastMembers = slices.Clone(obs.Members)
		w.mu.Unlock()
	}
	// Every answer used below must come from this cluster.
	cluster := obs.ClusterID

	// The local client URL is always asked who answers there (rule 7): by
	// the probe of the member listed with it, else on its own.
	var wg sync.WaitGroup
	answers := make([]answer, len(obs.Members))
	local := observation.Member{ClientURLs: []string{id.ClientURL}}
	var localAns answer
	li := slices.IndexFunc(obs.Members, func(m observation.Member) bool {
		return len(m.ClientURLs) > 0 && m.ClientURLs[0] == id.ClientURL
	})
	if li < 0 && id.ClientURL != "" {
		wg.Add(1)
		go func() { defer wg.Done(); localAns = w.clients.probe(ctx, &local, cluster) }()
	}
	for i := range obs.Members {
		wg.Add(1)
		go func() { defer wg.Done(); answers[i] = w.clients.probe(ctx, &obs.Members[i], cluster) }()
	}
	wg.Wait()
	if li >= 0 {
		local, localAns = obs.Members[li], answers[li]
	} else if localAns.foreign(cluster) {
		foreign = append(foreign, id.ClientURL)
	}
	for i, a := range answers {
		if a.foreign(cluster) {
			foreign = append(foreign, obs.Members[i].ClientURLs[0])
		}
	}
	obs.Local.AnsweringID, obs.Local.AnsweringClusterID = localAns.member, localAns.cluster
	obs.LeaderID = observation.Leader(obs.Members)
	observation.MatchLocal(&obs)
	if obs.Local.Match == observation.MatchOK {
		m, _ := obs.Member(obs.Local.ID)
		// AuthFailed from what answers at our own client URL (the member
		// list's may be a stale pod IP, now another cluster's).
		obs.Local.Serving, obs.Local.IsLearner, obs.Local.AuthFailed = m.Serving, m.IsLearner, !m.Serving && local.AuthFailed
		// A member's Status lists every alarm it knows (and "no leader")
		// as errors: with none, there is no alarm to ask about.
		if !m.Serving || len(m.Errors) > 0 {
			obs.Local.Alarms = w.alarms(ctx, append([]string{listEP}, eps...), m.ID, cluster, &foreign)
		}
	} else {
		// Not (unambiguously) ours: a process may answer, never ours to stop.
		obs.Local.Serving, obs.Local.AuthFailed = local.Serving, local.AuthFailed
	}
	obs.ForeignEndpoints = uniq(foreign)
	obs.ClusterVersion = w.clients.clusterVersion(ctx, obs)
	obs.PeersProbedAt = now
	w.rememberProbe(now, obs)
	w.watchLiveness()
	w.classifyDataDir(ctx, &obs, false)
	return obs
}

// pin is the cluster every answer must come from: the pin store's, else the
// one adopted from the first member list in this process (0: none yet).
func (w *Watchdog) pin() uint64 {
	if f := w.cfg.PinnedClusterID; f != nil {
		if id := f(); id != 0 {
			return id
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.clusterID
}

// alarms returns the alarms raised for member id.
// Answers of another cluster are skipped and added to foreign.
func (w *Watchdog) alarms(ctx context.Context, eps []string, id, cluster uint64, foreign *[]string) []string {
	for _, ep := range eps {
		if ep == "" {
			continue
		}
		cl, err := w.clients.get(ep)
		if err != nil {
			continue
		}
		rctx, cancel := context.WithTimeout(ctx, w.cfg.ProbeTimeout)
		resp, err := cl.AlarmList(rctx)
		cancel()
		if err != nil {
			continue
		}
		if (answer{cluster: resp.Header.ClusterId}).foreign(cluster) {
			*foreign = append(*foreign, ep)
			continue
		}
		var out []string
		for _, a := range resp.Alarms {
			if a.MemberID == id && a.Alarm != etcdserverpb.AlarmType_NONE {
				out = append(out, a.Alarm.String())
			}
		}
		return out
	}
	return nil
}

// classifyDataDir runs the cheap layout check always (in a reused poll,
// listing again only when a directory it rests on changed:
// localdisk.LayoutCache; a full observation always lists) and the deep check
// (db lock, bbolt + WAL + identity) when the member is not serving: a
// running member holds the db lock, and its open files are not what a
// restart would read. A broken layout is confirmed by the deep check too: a
// member bootstrapping has its db before its WAL (then in-use), and only a
// confirmed corrupt dir makes a stopped member lost at once. While Run
// polls, a deep check that takes long goes on in the background and the
// observation goes on with the layout verdict, unverified (deepCache): the
// agent keeps observing and reporting.
func (w *Watchdog) classifyDataDir(ctx context.Context, obs *observation.Observation, reuse bool) {
	dir := localdisk.Dirs{Data: obs.Local.DataDir, WAL: obs.Local.WALDir}
	r := w.layout.Classify(dir, reuse)
	if (r.Class == localdisk.ClassOK || r.Class == localdisk.ClassCorrupt) && !obs.Local.Serving {
		exp := localdisk.Expect{ClusterID: obs.ClusterID}
		if obs.Local.Match == observation.MatchOK {
			exp.MemberID = obs.Local.ID
		}
		if w.cfg.PinnedHighWater != nil {
			exp.HighWater = w.cfg.PinnedHighWater()
		}
		r = w.deep.classify(ctx, dir, exp, r, w.running.Load())
	}
	obs.Local.DataDirClass, obs.Local.DataDirDetail, obs.Local.DataDirVerified = string(r.Class), r.Detail, r.Verified
	obs.Local.DataDirClusterID, obs.Local.DataDirMemberID = r.ClusterID, r.MemberID
	obs.Local.DataDirRaft = nil // this poll's read only: a member that holds its data dir again moves on
	if r.Verified && (r.Class == localdisk.ClassOK || r.Class == localdisk.ClassStale) {
		obs.Local.DataDirRaft = &observation.RaftPosition{Term: r.WALTerm, Commit: r.WALCommit, LastIndex: r.WALIndex, Applied: r.ConsistentIndex, Revision: r.Revision}
	}
}

func uniq(in []string) []string {
	var out []string
	for _, s := range in {
		if s != "" && !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	return out
}
