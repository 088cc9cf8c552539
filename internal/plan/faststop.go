package plan

import (
	"fmt"
	"time"
)

// FastStopQuiet is how long the stop watch wants etcd's unary request
// counts unchanged, and etcd shutting down, before it ends etcd: a request
// counts as handled when its handler returns, and its answer is written
// after that (behind others on the same connection, under flow control).
const FastStopQuiet = 500 * time.Millisecond

// Fast stop: etcd, on SIGTERM, stops accepting client requests at once but
// then waits up to its request timeout (5 s + 2 election timeouts, 7 s by
// default) for every open client stream (the API server's watches) to end
// before it leaves raft and exits (embed.Etcd.Close). For a member whose
// data dir is already gone there is nothing to flush: that wait is pure
// delay on a heal's critical path. The gate's stop watch (package
// faststop) ends it early, and only when nothing can be lost by it.

// Fast stop verdict codes: why the stop watch ends etcd now, or why not.
const (
	FastStopNow            Reason = "nothing-to-flush"
	FastStopNotServed      Reason = "not-served-yet"
	FastStopServing        Reason = "serving"
	FastStopDataOnDisk     Reason = "data-on-disk"
	FastStopNoMetrics      Reason = "metrics-unavailable"
	FastStopLeader         Reason = "leader"
	FastStopRequestsInFlow Reason = "requests-in-flight"
)

// FastStopFacts is one look of the stop watch at its etcd.
type FastStopFacts struct {
	// Served: the watch's own gRPC connection to etcd was ready once (etcd
	// has served since it started; a starting etcd is never touched).
	Served bool
	// Drained: that connection has since been closed by etcd (the GOAWAY
	// of grpc's GracefulStop, sent to every client connection at once), and
	// ClientRefused: every URL etcd listens on for clients refuses new
	// connections. Both: etcd is shutting down its client servers and takes
	// no new request.
	Drained       bool
	ClientRefused bool
	// DBOnDisk: the data dir holds a db (member/snap/db). etcd's graceful
	// stop may still write it; only without one is there nothing to flush.
	DBOnDisk bool
	// MetricsError says why etcd's metrics (--listen-metrics-urls, which
	// etcd keeps open until its client servers are down) could not be read.
	MetricsError string
	// IsLeader: etcd_server_is_leader. A leader that stops gracefully hands
	// its leadership off first; killed, the cluster waits an election.
	IsLeader bool
	// UnaryInFlight: unary gRPC requests started and not yet handled
	// (grpc_server_started_total - grpc_server_handled_total): a write in
	// flight must get its answer, not a cut connection.
	UnaryInFlight int
	// QuietFor is how long etcd has been shutting down (Drained and
	// ClientRefused) with its unary request counts (started, handled)
	// unchanged: a count read between two requests, or before an answer
	// was written, proves nothing until it has held FastStopQuiet.
	QuietFor time.Duration
}

// DecideFastStop says whether etcd may be ended now rather than after its
// graceful wait: only a member that served, is already shutting its client
// servers down, has no db on disk, is not the leader and has no unary
// request in flight or arriving. Ending it then cuts only its open streams (watches,
// lease keep-alives), which clients re-open on another member from the
// revision they had; no answer is lost and no data either.
func DecideFastStop(f FastStopFacts) (bool, Reason, string) {
	switch {
	case !f.Served:
		return false, FastStopNotServed, "etcd has not served since it started"
	case !f.Drained || !f.ClientRefused:
		return false, FastStopServing, fmt.Sprintf("etcd is not shutting its client servers down (connection closed %v, client URL refused %v)", f.Drained, f.ClientRefused)
	case f.DBOnDisk:
		return false, FastStopDataOnDisk, "the data dir holds a db: etcd's own stop flushes it"
	case f.MetricsError != "":
		return false, FastStopNoMetrics, "requests in flight cannot be counted: " + f.MetricsError
	case f.IsLeader:
		return false, FastStopLeader, "etcd is the leader: its own stop hands leadership off first"
	case f.UnaryInFlight > 0:
		return false, FastStopRequestsInFlow, fmt.Sprintf("%d unary requests in flight", f.UnaryInFlight)
	case f.QuietFor < FastStopQuiet:
		return false, FastStopRequestsInFlow, fmt.Sprintf("requests counted unchanged for %s of %s", f.QuietFor.Round(time.Millisecond), FastStopQuiet)
	}
	return true, FastStopNow, "etcd is shutting down, its data dir holds no db, it is not the leader and no request is in flight: only its open streams wait, and clients re-open them elsewhere"
}
