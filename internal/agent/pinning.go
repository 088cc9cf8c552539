package agent

import (
	"context"
	"path/filepath"
	"reflect"
	"sync"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/nodereport"
	"github.com/etcd-agent/etcd-agent/internal/observation"
	"github.com/etcd-agent/etcd-agent/internal/pin"
	"github.com/etcd-agent/etcd-agent/internal/plan"
	"github.com/etcd-agent/etcd-agent/internal/record"
	"go.uber.org/zap"
	"k8s.io/client-go/kubernetes"
)

// pinRecord is where a member's pin outlives the node's disk: the Node (a
// static-pod member belongs to its node) or its cluster's record in the
// API (a pod member moves between nodes and claims).
type pinRecord interface {
	ReadPins(ctx context.Context) (map[string]pin.Pin, bool, error)
	// WritePin records p; first: the member's first pin.
	WritePin(ctx context.Context, p pin.Pin, first bool) error
	// Behind: the record's pin for the member (ok: it has one) needs ours
	// written back.
	Behind(rec pin.Pin, ok bool, ours pin.Pin) bool
	Where() string
}

// nodePins is a static-pod member's record: the Node's annotation.
type nodePins struct {
	kc   kubernetes.Interface
	node string
}

func (n nodePins) ReadPins(ctx context.Context) (map[string]pin.Pin, bool, error) {
	return nodereport.ReadPins(ctx, n.kc, n.node)
}
func (n nodePins) WritePin(ctx context.Context, p pin.Pin, _ bool) error {
	return nodereport.WritePin(ctx, n.kc, n.node, p)
}

// Behind: the Node is this node's alone; a missing or older pin is ours
// to write back.
func (n nodePins) Behind(rec pin.Pin, ok bool, ours pin.Pin) bool {
	return !ok || rec.SeenAt.Before(ours.SeenAt)
}
func (n nodePins) Where() string { return "Node " + n.node }

// pinner keeps the member's pin (plan.NextPin decides when it moves) in the
// state dir and in its record. The state dir is written first: it is what
// the start gate reads when the API is down. With admit (a pod member),
// while the member has no pin, it also renews the gate's admission: the
// record's word on whether the cluster has served (record.Admission).
type pinner struct {
	stateDir, member string
	remote           pinRecord // nil: state dir only
	admit            bool
	log              *zap.Logger

	mu           sync.Mutex
	pin          pin.Pin
	remoteBehind bool // the record's copy still needs writing
	remoteFirst  bool // and it is the member's first pin
	remoteTried  time.Time
	admittedAt   time.Time // the last admission written (or tried)
	recordRead   time.Time // the last check that the record still has our pin
	markRecorded time.Time // the last high-water mark written to the record (or tried)
	markBehind   bool      // the record's mark is behind the state dir's
}

// Node writes and record reads are spaced out while the API is away, so
// that a down API does not slow every observation by a request timeout.
const (
	nodeRetryEvery = 30 * time.Second
	// admissionRenewEvery keeps the gate's "never served" fresh (plan.
	// AdmissionFreshFor) while the member has no pin.
	admissionRenewEvery = 30 * time.Second
	// recordCheckEvery: a pinned member checks that its record still has
	// its pin (a ConfigMap deleted by hand or by the garbage collector
	// after its StatefulSet was deleted and created again), and writes it
	// back: a record without it would let a re-created member bootstrap.
	recordCheckEvery = 2 * time.Minute
	// highWaterRecordEvery spaces out the record's copy of a high-water
	// mark that moved (the state dir's moves with every full probe): the
	// mark moves with every write to the cluster, and the record is an API
	// write. A volume restored on another node is compared with a mark up
	// to this old.
	highWaterRecordEvery = 10 * time.Minute
)

// newPinner loads the state dir's pin, else adopts the record's (a node
// reinstalled with an empty state dir, or a pod member on a new node or
// claim, still knows its member existed). An unreadable pin is an error:
// the agent must not forget a member.
func newPinner(ctx context.Context, stateDir, member string, remote pinRecord, admit bool, log *zap.Logger) (*pinner, error) {
	p := &pinner{stateDir: stateDir, member: member, remote: remote, admit: admit, log: log}
	cur, ok, err := pin.Load(stateDir, member)
	if err != nil {
		return nil, err
	}
	if ok {
		p.pin, p.remoteBehind = cur, remote != nil
		if remote != nil {
			p.raiseMarkFromRecord(ctx)
		}
		return p, nil
	}
	if remote == nil {
		return p, nil
	}
	return p, p.adopt(ctx)
}

// adopt reads the record: the member's pin is taken when the state dir has
// none, and (admit) the gate is told whether the cluster has served. An
// unreadable record leaves the gate without a word (it holds a bootstrap).
func (p *pinner) adopt(ctx context.Context) error {
	p.admittedAt = time.Now()
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	pins, seen, err := p.remote.ReadPins(rctx)
	if err != nil {
		p.log.Warn("the member's record could not be read; the member counts as never seen until it serves", zap.String("record", p.remote.Where()), zap.Error(err))
		return nil
	}
	if rp, ok := pins[p.member]; ok && !p.pin.Seen() {
		rp.HighWater = rp.HighWater.Max(carriedMark(p.stateDir, rp))
		if err := pin.Save(p.stateDir, rp); err != nil {
			return err
		}
		p.log.Warn("adopted the member's pin from its record: the state dir had none (a new node or claim, a reinstalled node?)",
			zap.String("record", p.remote.Where()), zap.String("pin", rp.String()))
		p.pin = rp
	}
	if !p.admit {
		return nil
	}
	a := record.Admission{ClusterSeen: seen, Record: p.remote.Where(), CheckedAt: time.Now().UTC()}
	var newest pin.Pin // the cluster the record last saw serving
	for _, q := range pins {
		if q.SeenAt.After(newest.SeenAt) || newest.ClusterID == 0 {
			newest = q
		}
	}
	a.ClusterID = newest.ClusterID
	if err := pin.SaveAdmission(p.stateDir, a); err != nil {
		p.log.Error("could not give the start gate the record's word; retrying", zap.Error(err))
		p.admittedAt = time.Time{}
	}
	return nil
}

// raiseMarkFromRecord takes the record's high-water mark when it is ahead
// of the state dir's for the same member: a state dir rolled back with the
// node's disk must not lower the mark (nor write its lower one over the
// record's). Unread (the API away), the record's copy of the mark is not
// written for highWaterRecordEvery, by when checkRecord has read it.
func (p *pinner) raiseMarkFromRecord(ctx context.Context) {
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	pins, _, err := p.remote.ReadPins(rctx)
	if err != nil {
		p.log.Warn("could not read the member's record at start (its high-water mark is compared at the next record check)",
			zap.String("record", p.remote.Where()), zap.Error(err))
		p.markRecorded = time.Now()
		return
	}
	p.raiseMark(pins)
}

// raiseMark raises the pin's mark to the record's pin of the same member.
func (p *pinner) raiseMark(pins map[string]pin.Pin) {
	rp, ok := pins[p.member]
	if !ok || !rp.SameMember(p.pin) || !p.pin.HighWater.Behind(rp.HighWater) {
		return
	}
	next := p.pin
	next.HighWater = next.HighWater.Max(rp.HighWater)
	if err := pin.Save(p.stateDir, next); err != nil {
		p.log.Error("could not raise the member's high-water mark to its record's", zap.Error(err))
		return
	}
	p.log.Warn("the member's record knows a higher high-water mark than the state dir (was the state dir rolled back?); taken",
		zap.String("record", p.remote.Where()), zap.Uint64("index", next.HighWater.Index), zap.Uint64("was", p.pin.HighWater.Index))
	p.pin = next
}

// carriedMark is the highest high-water mark the set-aside state dirs of
// this member hold for the member rp pins: a dir set aside when its pod
// moved to a new claim (<dir>.<old claim UID>.<time>, e.g. a PVC restored
// from a volume snapshot), of the claim rp was written on, pinning the same
// member first seen at the same time (cluster and member IDs repeat when a
// cluster is created again with the same names and token). The record's
// copy of the mark is up to highWaterRecordEvery old.
func carriedMark(stateDir string, rp pin.Pin) record.Progress {
	var hw record.Progress
	if rp.ClaimUID == "" {
		return hw
	}
	asides, _ := filepath.Glob(stateDir + "." + rp.ClaimUID + ".*")
	for _, d := range asides {
		if q, ok, err := pin.Load(d, rp.Member); err == nil && ok && q.SameMember(rp) && q.FirstSeenAt.Equal(rp.FirstSeenAt) {
			hw = hw.Max(q.HighWater)
		}
	}
	return hw
}

// ClusterID is the pinned cluster ID (0 before the member was seen serving).
func (p *pinner) ClusterID() uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return uint64(p.pin.ClusterID)
}

// Current is the pin now.
func (p *pinner) Current() pin.Pin {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.pin
}

// observe moves the pin on when the observation says so, and writes it.
func (p *pinner) observe(ctx context.Context, o observation.Observation) {
	p.mu.Lock()
	defer p.mu.Unlock()
	next, changed := plan.NextPin(p.pin, p.member, o, o.At)
	identity := changed && !sameIdentity(p.pin, next)
	switch {
	case identity:
		if err := pin.Save(p.stateDir, next); err != nil {
			p.log.Error("could not record the member's pin in the state dir; retrying on the next observation", zap.Error(err))
			return
		}
		p.log.Info("member pinned", zap.String("pin", next.String()), zap.String("was", p.pin.String()))
		p.remoteFirst = p.remoteFirst || !p.pin.Seen()
		p.remoteBehind, p.pin = p.remote != nil, next
	case changed && next.HighWater != p.pin.HighWater:
		if err := pin.Save(p.stateDir, next); err != nil {
			// The state dir keeps the last mark it took; tried again
			// when the mark moves (the rest of the loop goes on).
			p.log.Error("could not record the member's high-water mark in the state dir", zap.Error(err))
			next.HighWater = p.pin.HighWater
		} else {
			p.markBehind = p.remote != nil
		}
		p.pin = next
	case changed:
		p.pin = next // only the newest progress seen: kept with the next save
	}
	if p.remote != nil && !p.pin.Seen() && (p.admit || p.admittedAt.IsZero()) && time.Since(p.admittedAt) >= admissionRenewEvery {
		if err := p.adopt(ctx); err != nil {
			p.log.Error("could not adopt the record's pin; retrying", zap.Error(err))
		}
	}
	if p.remote != nil && p.pin.Seen() && !p.remoteBehind && time.Since(p.recordRead) >= recordCheckEvery {
		p.checkRecord(ctx)
	}
	switch {
	case p.remoteBehind && (identity || time.Since(p.remoteTried) >= nodeRetryEvery):
		p.remoteTried = time.Now()
	case !p.remoteBehind && p.markBehind && time.Since(p.markRecorded) >= highWaterRecordEvery:
		// A mark alone is written (or tried) once per interval.
		p.markRecorded = time.Now()
	default:
		return
	}
	rctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	if err := p.remote.WritePin(rctx, p.pin, p.remoteFirst); err != nil {
		p.log.Warn("could not record the member's pin in its record; retrying later", zap.String("record", p.remote.Where()), zap.Error(err))
		return
	}
	p.remoteBehind, p.remoteFirst, p.markBehind, p.markRecorded = false, false, false, time.Now()
}

// sameIdentity: a and b differ at most in the member's progress.
func sameIdentity(a, b pin.Pin) bool {
	a.HighWater, a.Reached, b.HighWater, b.Reached = record.Progress{}, record.Progress{}, record.Progress{}, record.Progress{}
	return reflect.DeepEqual(a, b)
}

// checkRecord marks the record behind when it lacks our pin, or holds one
// the record says is ours to replace (pinRecord.Behind).
func (p *pinner) checkRecord(ctx context.Context) {
	p.recordRead = time.Now()
	rctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	pins, _, err := p.remote.ReadPins(rctx)
	if err != nil {
		p.log.Warn("could not check the member's record; checking again later", zap.String("record", p.remote.Where()), zap.Error(err))
		return
	}
	p.raiseMark(pins)
	if rp, ok := pins[p.member]; p.remote.Behind(rp, ok, p.pin) {
		p.log.Warn("the member's record lacks its pin (deleted or replaced?); writing it back", zap.String("record", p.remote.Where()),
			zap.String("pin", p.pin.String()))
		p.remoteBehind, p.remoteTried = true, time.Time{}
	}
}
