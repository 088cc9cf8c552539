package lab

import (
	"context"
	"crypto/tls"
	"fmt"
	"sort"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/lab/supervisor"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// MemberStatus is what one etcd member says about itself.
type MemberStatus struct {
	Node         string `json:"node"`
	Name         string `json:"name"`
	ID           string `json:"id"`
	ClientURL    string `json:"clientURL"`
	PeerURL      string `json:"peerURL"`
	Learner      bool   `json:"learner"`
	Leader       bool   `json:"leader"`
	Healthy      bool   `json:"healthy"`
	RaftIndex    uint64 `json:"raftIndex"`
	AppliedIndex uint64 `json:"appliedIndex"`
	DBSize       int64  `json:"dbSize"`
	Error        string `json:"error,omitempty"`
}

// Status is the lab as it is now: the cluster's members and the API.
type Status struct {
	Members    []MemberStatus `json:"members"`
	LeaderID   string         `json:"leaderID,omitempty"`
	APIReady   bool           `json:"apiReady"`
	APIError   string         `json:"apiError,omitempty"`
	Processes  []int          `json:"processes"`
	MemberList string         `json:"memberListError,omitempty"`
	// A management lab's worker Nodes and hosted etcd clusters.
	Nodes  []NodeStatus          `json:"nodes,omitempty"`
	Hosted []HostedClusterStatus `json:"hosted,omitempty"`
}

// Healthy counts the healthy voting members.
func (s Status) Healthy() (voters, healthy int) {
	for _, m := range s.Members {
		if m.Learner || m.ID == "" {
			continue
		}
		voters++
		if m.Healthy {
			healthy++
		}
	}
	return voters, healthy
}

// Status asks the cluster for its member list and every member for its
// Status plus a linearizable read through it, and the API for /readyz.
func (l *Lab) Status(ctx context.Context) Status {
	var st Status
	st.Processes = l.liveProcesses()
	cli, err := l.EtcdClient()
	if err != nil {
		st.MemberList = err.Error()
		return st
	}
	defer cli.Close()
	tlsCfg, _ := l.EtcdTLSConfig() // EtcdClient above built it already
	nodeByPeer := map[string]string{}
	for _, n := range l.Spec.Nodes {
		if n.PeerURL != "" {
			nodeByPeer[n.PeerURL] = n.Name
		}
	}
	if st.Members, err = probeMembers(ctx, cli, tlsCfg, nodeByPeer); err != nil {
		st.MemberList = err.Error()
		return st
	}
	for _, m := range st.Members {
		if m.Leader {
			st.LeaderID = m.ID
		}
	}
	if a := l.Spec.APIServer; a != nil {
		if err := apiReady(ctx, a); err != nil {
			st.APIError = err.Error()
		} else {
			st.APIReady = true
		}
	}
	if l.Spec.Management != nil && st.APIReady {
		l.hostedStatus(ctx, &st)
	}
	return st
}

// probeMembers lists the cluster's members through cli and probes each one
// (nodeByPeer names the node behind a peer URL, when known), by name.
func probeMembers(ctx context.Context, cli *clientv3.Client, tlsCfg *tls.Config, nodeByPeer map[string]string) ([]MemberStatus, error) {
	lctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	resp, err := cli.MemberList(lctx)
	cancel()
	if err != nil {
		return nil, err
	}
	var out []MemberStatus
	for _, m := range resp.Members {
		ms := MemberStatus{Name: m.Name, ID: fmt.Sprintf("%x", m.ID), Learner: m.IsLearner}
		if len(m.PeerURLs) > 0 {
			ms.PeerURL = m.PeerURLs[0]
			ms.Node = nodeByPeer[ms.PeerURL]
		}
		if len(m.ClientURLs) > 0 {
			ms.ClientURL = m.ClientURLs[0]
			probeMember(ctx, &ms, tlsCfg)
		} else {
			ms.Error = "not started (no client URL yet)"
		}
		out = append(out, ms)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// probeMember fills ms from the member's own Status and a linearizable read
// served through it (a learner serves no reads; its Status is enough).
func probeMember(ctx context.Context, ms *MemberStatus, tlsCfg *tls.Config) {
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{ms.ClientURL}, DialTimeout: 2 * time.Second, TLS: tlsCfg, Logger: zap.NewNop()})
	if err != nil {
		ms.Error = err.Error()
		return
	}
	defer c.Close()
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	s, err := c.Status(cctx, ms.ClientURL)
	if err != nil {
		ms.Error = err.Error()
		return
	}
	ms.Leader = s.Leader == s.Header.MemberId
	ms.RaftIndex, ms.AppliedIndex, ms.DBSize = s.RaftIndex, s.RaftAppliedIndex, s.DbSize
	if len(s.Errors) > 0 {
		ms.Error = fmt.Sprint(s.Errors)
		return
	}
	if s.Leader == 0 {
		ms.Error = "no leader"
		return
	}
	if !ms.Learner {
		if _, err := c.Get(cctx, "health-probe"); err != nil {
			ms.Error = "linearizable read: " + err.Error()
			return
		}
	}
	ms.Healthy = true
}

// WaitHealthy polls until the cluster has want healthy voting members, no
// learner, and a leader, or timeout passes.
func (l *Lab) WaitHealthy(ctx context.Context, want int, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var last Status
	for {
		last = l.Status(ctx)
		voters, healthy := last.Healthy()
		learners := len(last.Members) - voters
		if voters == want && healthy == want && learners == 0 && last.LeaderID != "" {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("cluster not healthy with %d voters after %s: %s", want, timeout, last.Summary())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// Summary is a one-line description of the status for errors and logs.
func (s Status) Summary() string {
	if s.MemberList != "" {
		return "member list: " + s.MemberList
	}
	out := ""
	for _, m := range s.Members {
		state := "healthy"
		if !m.Healthy {
			state = "unhealthy(" + m.Error + ")"
		}
		role := "voter"
		if m.Learner {
			role = "learner"
		}
		out += fmt.Sprintf("%s[%s %s] ", m.Name, role, state)
	}
	return out
}

func readSupervisorState(n Node) (supervisor.State, error) {
	return supervisor.ReadState(n.SupervisorStateFile())
}

// RunningEtcdPID is the PID of the node's etcd container as its supervisor
// last published it, and whether it is running. It reads only the node's
// own files, so it is safe beside a runner that changes the lab.
func (n Node) RunningEtcdPID() (int, bool) {
	st, err := readSupervisorState(n)
	if err != nil {
		return 0, false
	}
	c, ok := st.Container("etcd.yaml", "etcd")
	return c.PID, ok && c.State == "running" && c.PID != 0
}
