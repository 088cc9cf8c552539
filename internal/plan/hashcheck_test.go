package plan

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

func TestJudgeHashes(t *testing.T) {
	const rev = 500
	ok := func(i int, hash uint32, compact int64) HashAnswer {
		return HashAnswer{ID: id(i), Name: localNameOf(i), Serving: true, Revision: rev, Hash: hash, CompactRevision: compact}
	}
	dead := func(i int) HashAnswer { return HashAnswer{ID: id(i), Name: localNameOf(i), Revision: rev} }
	compacted := func(i int) HashAnswer {
		a := ok(i, 0, 0)
		a.Compacted = true
		return a
	}
	failed := func(i int) HashAnswer {
		a := ok(i, 0, 0)
		a.Err = "context deadline exceeded"
		return a
	}
	target := id(18)
	for _, c := range []struct {
		name    string
		voters  int
		answers []HashAnswer
		want    HashVerdict
		div     []uint64
		dead    []string
		detail  string
	}{
		{"all equal", 3, []HashAnswer{ok(1, 7, 100), ok(2, 7, 100), ok(18, 7, 100)}, HashEqual, nil, nil, "equal on 3 of 3"},
		{"5 voters, 1 lost for good: not waited for", 5,
			[]HashAnswer{ok(1, 7, 100), dead(2), ok(3, 7, 100), ok(4, 7, 100), ok(18, 7, 100)}, HashEqual, nil, []string{"node2"}, "node2"},
		{"5 voters, 2 dead: the 3 serving are a quorum", 5,
			[]HashAnswer{ok(1, 7, 100), dead(2), dead(3), ok(4, 7, 100), ok(18, 7, 100)}, HashEqual, nil, []string{"node2", "node3"}, "equal on 3 of 5"},
		{"fewer than a quorum compared", 5,
			[]HashAnswer{ok(1, 7, 100), dead(2), dead(3), failed(4), ok(18, 7, 100)}, HashNotYet, nil, []string{"node2", "node3"}, "node4"},
		{"rejoined member diverges", 3, []HashAnswer{ok(1, 7, 100), ok(2, 7, 100), ok(18, 9, 100)}, HashMismatch, []uint64{id(18)}, nil, "node18=9"},
		{"an old member diverges", 5,
			[]HashAnswer{ok(1, 7, 100), ok(2, 8, 100), ok(3, 7, 100), dead(4), ok(18, 7, 100)}, HashMismatch, []uint64{id(2)}, []string{"node4"}, "node2=8"},
		{"two members, no majority: both named", 2, []HashAnswer{ok(1, 7, 100), ok(18, 9, 100)}, HashMismatch, []uint64{id(1), id(18)}, nil, "node1=7"},
		{"a mismatch is final while another member is pending", 4,
			[]HashAnswer{ok(1, 7, 100), ok(2, 7, 100), failed(3), ok(18, 9, 100)}, HashMismatch, []uint64{id(18)}, nil, "differs"},
		{"hash 0 is a hash", 3, []HashAnswer{ok(1, 0, 100), ok(2, 0, 100), ok(18, 5, 100)}, HashMismatch, []uint64{id(18)}, nil, "node18=5"},
		{"different compact revisions are not compared", 3, []HashAnswer{ok(1, 7, 100), ok(2, 7, 100), ok(18, 9, 120)}, HashNotYet, nil, nil, "compact revisions differ"},
		{"a mismatch within one compact revision still counts", 4,
			[]HashAnswer{ok(1, 7, 100), ok(2, 8, 100), ok(3, 1, 120), ok(18, 7, 100)}, HashMismatch, []uint64{id(2)}, nil, "compact revision 100"},
		{"compacted past the revision: ask again, not a mismatch", 3, []HashAnswer{ok(1, 7, 100), compacted(2), ok(18, 7, 100)}, HashNotYet, nil, nil, "compacted past revision 500"},
		{"a serving voter that does not answer is waited for", 3, []HashAnswer{ok(1, 7, 100), failed(2), ok(18, 7, 100)}, HashNotYet, nil, nil, "node2: context deadline"},
		{"rejoined member not answering", 3, []HashAnswer{ok(1, 7, 100), ok(2, 7, 100), dead(18)}, HashNotYet, nil, []string{"node18"}, "has not answered"},
		{"nobody answers", 3, []HashAnswer{dead(1), dead(2), dead(18)}, HashNotYet, nil, []string{"node1", "node2", "node18"}, "no voter answered"},
	} {
		t.Run(c.name, func(t *testing.T) {
			j := JudgeHashes(target, c.voters, c.answers)
			if j.Verdict != c.want || !slices.Equal(j.Diverging, c.div) || !slices.Equal(j.Dead, c.dead) {
				t.Errorf("JudgeHashes = %s diverging %x dead %v (%s), want %s diverging %x dead %v",
					j.Verdict, j.Diverging, j.Dead, j.Detail, c.want, c.div, c.dead)
			}
			if !strings.Contains(j.Detail, c.detail) {
				t.Errorf("detail %q does not say %q", j.Detail, c.detail)
			}
			if again := JudgeHashes(target, c.voters, c.answers); !slices.Equal(again.Diverging, j.Diverging) || again.Detail != j.Detail {
				t.Errorf("not deterministic: %+v then %+v", j, again)
			}
		})
	}
}

func localNameOf(i int) string { return fmt.Sprintf("node%d", i) }

// Random rounds: a mismatch is reported exactly when two comparable answers
// (same compact revision) differ; equal needs every serving voter answered
// at one compact revision, the target among them, a quorum in all.
func TestJudgeHashesProperties(t *testing.T) {
	r := rand.New(rand.NewPCG(20261201, 10))
	verdicts := map[HashVerdict]int{}
	for run := range 20_000 {
		voters := 1 + r.IntN(7)
		var as []HashAnswer
		for i := range voters {
			a := HashAnswer{ID: id(i), Name: localNameOf(i), Serving: r.Float64() < 0.8, Revision: 900,
				Hash: uint32(r.IntN(2)), CompactRevision: int64(100 + 10*r.IntN(2))}
			if r.Float64() < 0.85 {
				a.Hash, a.CompactRevision = 1, 100
			}
			a.Compacted = a.Serving && r.Float64() < 0.05
			if a.Serving && r.Float64() < 0.05 {
				a.Err = "unavailable"
			}
			as = append(as, a)
		}
		target := id(r.IntN(voters))
		j := JudgeHashes(target, voters, as)
		verdicts[j.Verdict]++
		hashes := map[int64]map[uint32]bool{}
		var dead []string
		answered, hasTarget := 0, false
		for _, a := range as {
			if !a.Serving {
				dead = append(dead, a.Name)
			}
			if !a.answered() {
				continue
			}
			answered++
			hasTarget = hasTarget || a.ID == target
			if hashes[a.CompactRevision] == nil {
				hashes[a.CompactRevision] = map[uint32]bool{}
			}
			hashes[a.CompactRevision][a.Hash] = true
		}
		differ := false
		for _, hs := range hashes {
			differ = differ || len(hs) > 1
		}
		pending := slices.ContainsFunc(as, func(a HashAnswer) bool { return a.Serving && !a.answered() })
		switch {
		case differ != (j.Verdict == HashMismatch):
			t.Fatalf("run %d: %s with comparable hashes differing %v: %+v", run, j.Verdict, differ, as)
		case j.Verdict == HashEqual && (pending || len(hashes) != 1 || !hasTarget || answered < (voters/2+1)):
			t.Fatalf("run %d: equal with pending %v, %d compact revisions, target %v, %d answered of %d: %+v",
				run, pending, len(hashes), hasTarget, answered, voters, as)
		case !slices.Equal(j.Dead, dead):
			t.Fatalf("run %d: dead %v, want %v", run, j.Dead, dead)
		case j.Verdict == HashMismatch && len(j.Diverging) == 0:
			t.Fatalf("run %d: mismatch naming nobody: %+v", run, as)
		}
	}
	for _, v := range []HashVerdict{HashEqual, HashNotYet, HashMismatch} {
		if verdicts[v] == 0 {
			t.Errorf("no random round led to %s", v)
		}
	}
	t.Logf("verdicts: %v", verdicts)
}
