package chaos

import (
	"slices"
	"time"
)

// Kind names a fault of the catalog.
type Kind string

// The catalog. Each kind's lab verb is in inject.go.
const (
	WipeRunning       Kind = "wipe-running"       // a running member's data dir removed
	WipeStopped       Kind = "wipe-stopped"       // a stopped member's data dir removed, then started
	KillEtcd          Kind = "kill-etcd"          // SIGKILL; the supervisor restarts it
	PauseLeader       Kind = "pause-leader"       // SIGSTOP the leader for Hold, then SIGCONT
	PauseFollower     Kind = "pause-follower"     // SIGSTOP a follower for Hold, then SIGCONT
	PauseHung         Kind = "pause-hung"         // SIGSTOP a follower longer than the grace period: it may be rejoined
	CorruptDB         Kind = "corrupt-db"         // bbolt file overwritten while stopped
	CorruptWAL        Kind = "corrupt-wal"        // newest WAL overwritten while stopped
	TornWAL           Kind = "torn-wal"           // a torn record after a crashed member's WAL tail: etcd repairs it, no heal
	LoseNode          Kind = "lose-node"          // node and disk gone; member moved to a new node (UC1)
	PartitionLeader   Kind = "partition-leader"   // the leader's peer traffic cut for Hold
	PartitionFollower Kind = "partition-follower" // a follower's peer traffic cut for Hold
	DiskFull          Kind = "disk-full"          // the node's local storage filled for Hold
	APIStopShort      Kind = "api-stop-short"     // kube-apiserver down shorter than the Lease TTL
	APIStopLong       Kind = "api-stop-long"      // kube-apiserver down longer than the Lease TTL
	AgentKill         Kind = "agent-kill"         // SIGKILL an agent
	AgentTerm         Kind = "agent-term"         // SIGTERM an agent
	// Majority mode: two members down at once.
	MajorityStop     Kind = "majority-stop"      // two members stopped for Hold
	MajorityPause    Kind = "majority-pause"     // two members SIGSTOPped for Hold
	MajorityStopWipe Kind = "majority-stop-wipe" // two stopped, one of them wiped; the other back after Hold
)

// span is a range of durations to draw from.
type span struct{ min, max time.Duration }

// fault is what the schedule and the runner need to know of a kind.
type fault struct {
	// healing: the agent is expected to rejoin the member (it lost its
	// data), so a control-plane fault during it is worth drawing.
	healing bool
	// mayRejoin: the member is down longer than the grace period, so the
	// agent may rejoin it, or not (it may serve again before the stop).
	// A fault neither healing nor mayRejoin must leave every member's ID.
	mayRejoin bool
	// hold: how long the fault lasts before it is undone (zero: not undone).
	hold span
	// majority: a majority-mode fault on two slots.
	majority bool
	// extraOnly: drawn only as an episode's second fault.
	extraOnly bool
	// agent: the fault hits an agent (Extra.Slot says whose).
	agent bool
	// needs: a lab feature this kind cannot run without.
	needs feature
}

type feature int

const (
	none feature = iota
	peerProxy
	diskLimit
)

// leaseTTL is the lab's --lease-ttl: the API stops are drawn either side of it.
const leaseTTL = 15 * time.Second

// gracePeriod is the chaos lab's --grace-period: longer than every hold of
// a fault that must not make the agent rejoin (pauses, partitions, a full
// disk), shorter than pause-hung's. A data dir missing or corrupt is lost
// at once, whatever the grace period.
const gracePeriod = 40 * time.Second

var catalog = map[Kind]fault{
	WipeRunning:       {healing: true},
	WipeStopped:       {healing: true},
	KillEtcd:          {},
	PauseLeader:       {hold: span{2 * time.Second, 20 * time.Second}},
	PauseFollower:     {hold: span{2 * time.Second, 30 * time.Second}},
	PauseHung:         {hold: span{gracePeriod + 10*time.Second, gracePeriod + 40*time.Second}, mayRejoin: true},
	CorruptDB:         {healing: true},
	CorruptWAL:        {healing: true},
	TornWAL:           {},
	LoseNode:          {healing: true},
	PartitionLeader:   {hold: span{2 * time.Second, 20 * time.Second}, needs: peerProxy},
	PartitionFollower: {hold: span{2 * time.Second, 30 * time.Second}, needs: peerProxy},
	DiskFull:          {hold: span{3 * time.Second, 20 * time.Second}, needs: diskLimit},
	APIStopShort:      {extraOnly: true, hold: span{2 * time.Second, leaseTTL - 3*time.Second}},
	APIStopLong:       {extraOnly: true, hold: span{leaseTTL + 5*time.Second, 3 * leaseTTL}},
	AgentKill:         {extraOnly: true, agent: true},
	AgentTerm:         {extraOnly: true, agent: true},
	MajorityStop:      {majority: true, hold: span{10 * time.Second, 40 * time.Second}},
	MajorityPause:     {majority: true, hold: span{5 * time.Second, 30 * time.Second}},
	MajorityStopWipe:  {majority: true, hold: span{10 * time.Second, 40 * time.Second}},
}

// Kinds lists the catalog in a fixed order (the schedule draws by index).
func Kinds() []Kind {
	out := make([]Kind, 0, len(catalog))
	for k := range catalog {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
