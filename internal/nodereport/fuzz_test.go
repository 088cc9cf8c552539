package nodereport

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"
)

// The annotations these targets fuzz are written by people (kubectl
// annotate) and by other nodes' agents; the agent must read each the same
// way whatever it holds. Seeds are the values of this package's tests.

// annotationSet builds a Node's annotations: present says which of the
// three request annotations exist (bits 0, 1, 2: recover, dry run, move-from;
// bit 3: move-to).
func annotationSet(present uint8, recover, dry, from, to string) map[string]string {
	a := map[string]string{"unrelated": "x"}
	for bit, kv := range [][2]string{{AnnotationRecover, recover}, {AnnotationRecoverDryRun, dry},
		{AnnotationMoveFrom, from}, {AnnotationMoveTo, to}} {
		if present&(1<<bit) != 0 {
			a[kv[0]] = kv[1]
		}
	}
	return a
}

// FuzzParseRequest: a request exists exactly when etcd-agent.io/recover
// does; one accepted is a rejoin or a move-in whose dry-run flag is what
// the annotation says and whose source is the move-from annotation as
// ParseMoveFrom reads it. A refused one never reads as a dry run. On a
// pod, move-to wins, and an accepted move names its target.
func FuzzParseRequest(f *testing.F) {
	for _, s := range []struct {
		present            uint8
		recover, dry, from string
	}{
		{0, "", "", ""}, {2, "", "true", ""}, {1, "rejoin", "", ""}, {3, "rejoin", "true", ""}, {3, "rejoin", "false", ""},
		{1, "reboot", "", ""}, {1, "", "", ""}, {1, "Rejoin", "", ""}, {3, "rejoin", "yes", ""}, {3, "rejoin", "1", ""},
		{5, "move-in", "", "cp-2/a1b2/x1"}, {5, "move-in", "", "cp-2/a1b2"}, {1, "move-in", "", ""},
		{5, "move-in", "", "cp-2/zz/x1"}, {5, "move-in", "", "cp-2/0/x1"}, {7, "move-in", "true", "cp-2/a1b2/lzk3h0"},
	} {
		f.Add(s.present, s.recover, s.dry, s.from, "")
		f.Add(s.present|8, s.recover, s.dry, s.from, "node-3")
	}
	f.Fuzz(func(t *testing.T, present uint8, recover, dry, from, to string) {
		a := annotationSet(present, recover, dry, from, to)
		req, ok, err := ParseRequest(a)
		_, hasRecover := a[AnnotationRecover]
		dryVal, hasDry := a[AnnotationRecoverDryRun]
		if ok != hasRecover || !ok && (err != nil || req != Request{}) {
			t.Fatalf("ParseRequest(%q) = %+v, %v, %v", a, req, ok, err)
		}
		switch {
		case err != nil && req.DryRun:
			t.Fatalf("a refused request reads as a dry run: %+v %v", req, err)
		case err != nil || !ok:
		case req.DryRun != (hasDry && dryVal == "true") || hasDry && dryVal != "true" && dryVal != "false":
			t.Fatalf("dry run %q read as %v", dryVal, req.DryRun)
		case req.Action == ActionRejoin:
			if req.From != "" || req.Replaces != 0 || req.Target != "" {
				t.Fatalf("a rejoin with a move's fields: %+v", req)
			}
		case req.Action == ActionMoveIn:
			node, id, perr := ParseMoveFrom(req.From)
			if req.From != a[AnnotationMoveFrom] || perr != nil || id != req.Replaces || node == "" {
				t.Fatalf("move-in %+v from %q: ParseMoveFrom = %q, %x, %v", req, a[AnnotationMoveFrom], node, id, perr)
			}
		default:
			t.Fatalf("accepted action %q", req.Action)
		}
		if ok && err == nil && req.String() != req.Action && req.String() != req.Action+" (dry run)" {
			t.Fatalf("String() = %q", req.String())
		}

		preq, pok, perr := ParsePodRequest(a)
		target, hasTo := a[AnnotationMoveTo]
		switch {
		case !hasTo:
			if preq != req || pok != ok || (perr == nil) != (err == nil) {
				t.Fatalf("on a pod without move-to: %+v %v %v, on a Node: %+v %v %v", preq, pok, perr, req, ok, err)
			}
		case !pok || preq.Action != ActionMoveAway || preq.Target != target:
			t.Fatalf("move-to %q read as %+v %v", target, preq, pok)
		case perr == nil && (target == "" || preq.DryRun != (hasDry && dryVal == "true") || hasDry && dryVal != "true" && dryVal != "false"):
			t.Fatalf("move-to %q, dry run %q accepted as %+v", target, dryVal, preq)
		case perr != nil && preq.DryRun:
			t.Fatalf("a refused move reads as a dry run: %+v %v", preq, perr)
		}
	})
}

// FuzzParseMoveFrom: an accepted move-from names a node (no "/") and a
// member ID other than 0, and is that node's MoveSource followed by the
// ask; what MoveFrom writes for a valid node and ID is read back as them.
func FuzzParseMoveFrom(f *testing.F) {
	for _, v := range []string{"cp-2/a1b2/x1", "cp-2/a1b2", "", "cp-2/zz/x1", "cp-2/0/x1", "cp-2/A1B2/x", "cp-2/00a1b2/x",
		"/a1b2/x", "cp-2/a1b2/", "cp-2/a1b2/x/y", "cp-2/ffffffffffffffff/x", "cp-2/10000000000000000/x"} {
		f.Add(v, "cp-2", uint64(0xa1b2), int64(1700000000000000000))
	}
	f.Add("", "node/with/slashes", uint64(1), int64(-1))
	f.Add("", "", uint64(0), int64(0))
	f.Fuzz(func(t *testing.T, v, node string, id uint64, nanos int64) {
		n, mid, err := ParseMoveFrom(v)
		if err == nil {
			if n == "" || strings.Contains(n, "/") || mid == 0 {
				t.Fatalf("ParseMoveFrom(%q) = %q, %x", v, n, mid)
			}
			ask := v[strings.LastIndexByte(v, '/')+1:]
			if n2, id2, err := ParseMoveFrom(MoveSource(n, mid) + ask); err != nil || n2 != n || id2 != mid {
				t.Fatalf("%q: MoveSource(%q, %x)+%q reads as %q, %x, %v", v, n, mid, ask, n2, id2, err)
			}
		} else if n != "" || mid != 0 {
			t.Fatalf("ParseMoveFrom(%q) failed but returned %q, %x", v, n, mid)
		}

		w := MoveFrom(node, id, time.Unix(0, nanos))
		n, mid, err = ParseMoveFrom(w)
		valid := node != "" && !strings.Contains(node, "/") && id != 0
		if valid != (err == nil) || valid && (n != node || mid != id) {
			t.Fatalf("MoveFrom(%q, %x) = %q reads as %q, %x, %v", node, id, w, n, mid, err)
		}
		if !strings.HasPrefix(w, MoveSource(node, id)) {
			t.Fatalf("MoveFrom %q does not start with MoveSource %q", w, MoveSource(node, id))
		}
	})
}

// FuzzParseMoveSeed: an accepted move-seed is complete (cluster and
// removed member IDs, key, sha256, size, recovery), and what Encode writes
// of it reads back as the same; a refused one yields no IDs.
func FuzzParseMoveSeed(f *testing.F) {
	good := MoveSeed{Recovery: "r-1", From: "etcd/etcd-1@node-1", Key: "moves/etcd-1/r-1.db", SHA256: strings.Repeat("ab", 32),
		Size: 20480, ClusterID: "cdf818194e3a8c32", Removed: "8e9e05c52164694d"}
	f.Add(good.Encode())
	f.Add(`{"recovery":"r","key":"k","sha256":"s","size":1,"clusterID":"0","removed":"1"}`)
	f.Add(`{"recovery":"r","key":"k","sha256":"s","size":-1,"clusterID":"1","removed":"1"}`)
	f.Add(`{"recovery":"r","key":"k","sha256":"s","size":1,"clusterID":"0x1","removed":"1"}`)
	f.Add(`{"recovery":"r","key":"k","sha256":"s","size":1,"clusterID":"1","removed":"FFFFFFFFFFFFFFFF","extra":[1]}`)
	f.Add(`not json`)
	f.Add(``)
	f.Fuzz(func(t *testing.T, v string) {
		s, cluster, removed, err := ParseMoveSeed(v)
		if err != nil {
			if cluster != 0 || removed != 0 {
				t.Fatalf("refused %q but returned IDs %x %x", v, cluster, removed)
			}
			return
		}
		if cluster == 0 || removed == 0 || s.Key == "" || s.SHA256 == "" || s.Size <= 0 || s.Recovery == "" {
			t.Fatalf("accepted an incomplete move-seed %q: %+v", v, s)
		}
		s2, c2, r2, err := ParseMoveSeed(s.Encode())
		if err != nil || s2 != s || c2 != cluster || r2 != removed {
			t.Fatalf("round trip of %+v: %+v %x %x %v", s, s2, c2, r2, err)
		}
	})
}

// FuzzLastRecoveryFrom: the last-recovery annotation, another agent's
// answer: a refused one yields the zero value; an accepted one re-encoded
// reads back as the same.
func FuzzLastRecoveryFrom(f *testing.F) {
	for _, lr := range []LastRecovery{
		{Request: "rejoin (dry run)", Result: ResultRefused, Reason: "QuorumAtRisk", StartedAt: time.Unix(100, 0).UTC(), FinishedAt: time.Unix(130, 0).UTC()},
		{Request: "move-in", Result: ResultSucceeded, Phase: "done", RejoinMode: "seed", MoveFrom: "cp-2/a1b2/x1", MemberID: "c0ffee",
			StartedAt: time.Date(2026, 1, 2, 3, 4, 5, 6, time.FixedZone("x", 3600)), FinishedAt: time.Date(2026, 1, 2, 3, 4, 6, 0, time.UTC)},
	} {
		b, _ := json.Marshal(lr)
		f.Add(string(b))
	}
	f.Add(`{"request":"rejoin","result":"failed","startedAt":"2026-13-01T00:00:00Z"}`)
	f.Add(`{"request":1}`)
	f.Add(``)
	f.Fuzz(func(t *testing.T, v string) {
		lr, ok, err := LastRecoveryFrom(map[string]string{AnnotationLastRecovery: v})
		if !ok {
			t.Fatal("the annotation is there")
		}
		if err != nil {
			if !reflect.DeepEqual(lr, LastRecovery{}) {
				t.Fatalf("refused %q but returned %+v", v, lr)
			}
			return
		}
		b, err := json.Marshal(lr)
		if err != nil {
			t.Fatalf("accepted %q but cannot write it again: %v", v, err)
		}
		lr2, _, err := LastRecoveryFrom(map[string]string{AnnotationLastRecovery: string(b)})
		b2, _ := json.Marshal(lr2)
		if err != nil || string(b2) != string(b) {
			t.Fatalf("round trip of %q: %s then %s (%v)", v, b, b2, err)
		}
	})
}
