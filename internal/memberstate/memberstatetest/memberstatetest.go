// Package memberstatetest holds observations that more than one package's
// unit tests start from. Imported by tests only.
package memberstatetest

import (
	"fmt"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/memberstate"
	"github.com/etcd-agent/etcd-agent/internal/observation"
)

// Healthy3 is node1's observation of a healthy three-voter cluster it
// leads (member IDs 1-3, cluster ID 0xc1).
func Healthy3() memberstate.Result {
	o := observation.Observation{At: time.Now(), ClusterID: 0xc1, LeaderID: 1}
	for i := uint64(1); i <= 3; i++ {
		o.Members = append(o.Members, observation.Member{ID: i, Name: fmt.Sprintf("node%d", i), Serving: true, IsLeader: i == 1,
			PeerURLs: []string{fmt.Sprintf("http://127.0.0.%d:2380", i)}, ClientURLs: []string{fmt.Sprintf("http://127.0.0.%d:2379", i)}})
	}
	o.Local = observation.Local{Name: "node1", Match: observation.MatchOK, ID: 1, DataDirClass: observation.DataDirOK}
	return memberstate.Result{Observation: o, Verdict: memberstate.Verdict{State: memberstate.Healthy}}
}
