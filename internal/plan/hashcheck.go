package plan

import (
	"fmt"
	"slices"
	"strings"

	"github.com/etcd-agent/etcd-agent/internal/memberstate"
)

// HashAnswer is one voter's answer to HashKV at Revision, as the executor
// gathered it. A voter the observation does not see serving is not asked
// (Serving false): it is reported, never waited for.
type HashAnswer struct {
	ID      uint64
	Name    string
	Serving bool
	// Revision is the revision asked.
	Revision int64
	Hash     uint32
	// CompactRevision is the compact revision the member answered with;
	// hashes are comparable only between equal compact revisions (as in
	// etcd's own corruption check).
	CompactRevision int64
	// Compacted: the member has compacted past Revision (ErrCompacted);
	// it is asked again at a newer revision, never counted as a mismatch.
	Compacted bool
	// Err is why a serving voter did not answer ("" when it did).
	Err string
}

func (a HashAnswer) answered() bool { return a.Serving && !a.Compacted && a.Err == "" }

// HashVerdict is the judgement on one round of HashKV answers.
type HashVerdict string

// Hash verdicts.
const (
	HashEqual    HashVerdict = "equal"    // a quorum of voters, the rejoined one included, agree
	HashNotYet   HashVerdict = "not-yet"  // ask again (at a newer revision)
	HashMismatch HashVerdict = "mismatch" // comparable voters differ: a divergent voter serves reads
)

// HashJudgement is JudgeHashes' answer.
type HashJudgement struct {
	Verdict HashVerdict
	Detail  string
	// Diverging lists the voters whose hash differs from the majority of
	// their compact-revision group (all of the group when there is none).
	Diverging []uint64
	// Dead names the voters not serving: reported, not waited for.
	Dead []string
}

// JudgeHashes judges the HashKV answers of one round: voters is the number
// of voting members, target the rejoined member. A mismatch between
// comparable answers is final, whatever else is pending; equal needs the
// target and a quorum of voters in agreement, at one compact revision,
// with every serving voter answered.
func JudgeHashes(target uint64, voters int, answers []HashAnswer) HashJudgement {
	var j HashJudgement
	var pending []string
	groups := map[int64][]HashAnswer{}
	for _, a := range answers {
		switch {
		case !a.Serving:
			j.Dead = append(j.Dead, a.Name)
		case a.Compacted:
			pending = append(pending, fmt.Sprintf("%s compacted past revision %d", a.Name, a.Revision))
		case a.Err != "":
			pending = append(pending, fmt.Sprintf("%s: %s", a.Name, a.Err))
		default:
			groups[a.CompactRevision] = append(groups[a.CompactRevision], a)
		}
	}
	compacts := make([]int64, 0, len(groups))
	for c := range groups {
		compacts = append(compacts, c)
	}
	slices.Sort(compacts)
	var mismatches []string
	for _, c := range compacts {
		div, text := diverging(groups[c])
		if len(div) > 0 {
			j.Diverging = append(j.Diverging, div...)
			mismatches = append(mismatches, fmt.Sprintf("at compact revision %d: %s", c, text))
		}
	}
	dead := ""
	if len(j.Dead) > 0 {
		dead = fmt.Sprintf("; not serving, not asked: %s", strings.Join(j.Dead, ", "))
	}
	rev := int64(0)
	if len(answers) > 0 {
		rev = answers[0].Revision
	}
	switch {
	case len(mismatches) > 0:
		j.Verdict = HashMismatch
		j.Detail = fmt.Sprintf("HashKV differs at revision %d %s%s", rev, strings.Join(mismatches, "; "), dead)
	case len(pending) > 0:
		j.Verdict, j.Detail = HashNotYet, fmt.Sprintf("waiting for %s%s", strings.Join(pending, "; "), dead)
	case len(groups) > 1:
		j.Verdict, j.Detail = HashNotYet, fmt.Sprintf("compact revisions differ (%v): asking again at a newer revision%s", compacts, dead)
	case len(groups) == 0:
		j.Verdict, j.Detail = HashNotYet, "no voter answered"+dead
	default:
		g := groups[compacts[0]]
		switch {
		case !slices.ContainsFunc(g, func(a HashAnswer) bool { return a.ID == target }):
			j.Verdict, j.Detail = HashNotYet, fmt.Sprintf("the rejoined member %x has not answered%s", target, dead)
		case len(g) < memberstate.Quorum(voters):
			j.Verdict, j.Detail = HashNotYet, fmt.Sprintf("%d of %d voters compared, quorum is %d%s", len(g), voters, memberstate.Quorum(voters), dead)
		default:
			j.Verdict = HashEqual
			j.Detail = fmt.Sprintf("HashKV %d equal on %d of %d voters at revision %d (compact revision %d)%s",
				g[0].Hash, len(g), voters, rev, compacts[0], dead)
		}
	}
	return j
}

// diverging returns the members of one compact-revision group whose hash
// differs from the group's majority hash (every member when no hash has a
// strict plurality), and a text naming each member's hash.
func diverging(g []HashAnswer) ([]uint64, string) {
	count := map[uint32]int{}
	for _, a := range g {
		count[a.Hash]++
	}
	if len(count) < 2 {
		return nil, ""
	}
	best, bestN, tie := uint32(0), 0, false
	for _, a := range g { // in answer order: deterministic
		switch n := count[a.Hash]; {
		case n > bestN:
			best, bestN, tie = a.Hash, n, false
		case n == bestN && a.Hash != best:
			tie = true
		}
	}
	var ids []uint64
	var parts []string
	for _, a := range g {
		parts = append(parts, fmt.Sprintf("%s=%d", a.Name, a.Hash))
		if tie || a.Hash != best {
			ids = append(ids, a.ID)
		}
	}
	return ids, strings.Join(parts, " ")
}
