package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/localdisk"
	"github.com/etcd-agent/etcd-agent/internal/observation"
)

// walReadTimeout bounds /status's read of a held data dir's WAL.
const walReadTimeout = 4 * time.Second

// statusHandler serves /status: the latest poll's report, with the log
// position AddLogPosition adds; that full read of the WAL runs on request
// only (not every poll), with the majority lost only, one at a time,
// bounded, in a child process (docs/design.md, "Majority lost, guided").
type statusHandler struct {
	latest *atomic.Pointer[Report]
	// podsStateDir, with --member-source=pods (latest nil): /status?pod=
	// <namespace>/<name> serves that member's latest report, from its
	// status file under it.
	podsStateDir string
	busy         chan struct{} // one WAL read at a time
	hasher       *dbHasher
}

func (h *statusHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var rep Report
	if h.latest != nil {
		p := h.latest.Load()
		if p == nil {
			http.Error(w, "no observation yet", http.StatusServiceUnavailable)
			return
		}
		rep = *p
	} else {
		var code int
		var err error
		if rep, code, err = podMemberReport(h.podsStateDir, r.URL.Query().Get("pod")); err != nil {
			http.Error(w, err.Error(), code)
			return
		}
	}
	if rep.Where != nil {
		rep.Where = rep.Where.WithLayout() // a disk mounted since the poll, or since the agent started
	}
	if needsLogPosition(rep) {
		if err := h.addLogPosition(r, &rep); err != nil {
			rep.Observation.Local.DataDirRaftError = err.Error()
		}
	}
	if h.hasher != nil {
		h.hasher.add(r.Context(), &rep, hashWaitInStatus)
	}
	rep.ServedAt = time.Now()
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(rep)
}

// needsLogPosition: the majority is lost and etcd holds the data dir but
// does not serve (restarted without a quorum, etcd never serves clients),
// so the poll could not read where its log stands, and nothing else says
// it. With a quorum a member that does not serve (crash-looping) is the
// heal's, and its WAL is not read for anyone who asks.
func needsLogPosition(rep Report) bool {
	l := rep.Observation.Local
	return rep.MajorityLost && l.DataDirRaft == nil && l.DataDirClass == string(localdisk.ClassInUse) && !l.Serving && rep.Where != nil
}

// AddLogPosition reads where the member's log stands from its WAL, read-only
// and without a lock, in the inspection child (its memory apart from the
// agent's, killed when ctx ends), when the majority is lost and its etcd
// holds the data dir without serving; the WAL must be the member's the
// poll saw there.
func AddLogPosition(ctx context.Context, rep *Report) error {
	if !needsLogPosition(*rep) {
		return nil
	}
	l := &rep.Observation.Local
	p, err := localdisk.ReadRaftPositionIsolated(ctx, localdisk.Dirs{Data: rep.Where.DataDir, WAL: rep.Where.WALDir})
	if err == nil && l.DataDirMemberID != 0 && p.MemberID != l.DataDirMemberID {
		err = fmt.Errorf("the WAL is member %x's, not %x's", p.MemberID, l.DataDirMemberID)
	}
	if err != nil {
		l.DataDirRaftError = err.Error()
		return err
	}
	l.DataDirRaft = &observation.RaftPosition{Term: p.Term, Commit: p.Commit, LastIndex: p.LastIndex, FromWAL: true}
	return nil
}

// addLogPosition is AddLogPosition if no other read runs, bounded by
// walReadTimeout and the request.
func (h *statusHandler) addLogPosition(r *http.Request, rep *Report) error {
	select {
	case h.busy <- struct{}{}:
	default:
		return errors.New("another read of the WAL runs")
	}
	defer func() { <-h.busy }()
	ctx, cancel := context.WithTimeout(r.Context(), walReadTimeout)
	defer cancel()
	return AddLogPosition(ctx, rep)
}

// podMemberReport is the latest report of the pod member pod
// ("namespace/name") this agent serves, with the HTTP status of a failure.
func podMemberReport(stateDir, pod string) (Report, int, error) {
	ns, name, ok := strings.Cut(pod, "/")
	// (Matched against the members listed, never made into a path.)
	if !ok || ns == "" || name == "" {
		return Report{}, http.StatusBadRequest, fmt.Errorf("want ?pod=<namespace>/<name>, got %q", pod)
	}
	st, err := PodMembersStatus(stateDir)
	if err != nil {
		return Report{}, http.StatusInternalServerError, err
	}
	for _, s := range st {
		if s.Pod != pod {
			continue
		}
		if s.Error != "" {
			return Report{}, http.StatusServiceUnavailable, fmt.Errorf("%s: %s", pod, s.Error)
		}
		return s.Report, http.StatusOK, nil
	}
	return Report{}, http.StatusNotFound, fmt.Errorf("this agent serves no member pod %s", pod)
}
