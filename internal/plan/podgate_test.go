package plan

import (
	"errors"
	"strings"
	"testing"
)

func TestPodGateHoldsOnlyThroughTheGateOnThisStateDirForPods(t *testing.T) {
	ok := PodGate{Wrapped: true, StateDir: "/var/lib/etcd-agent/", MemberSource: "pods"}
	if err := PodGateHolds(ok, "/var/lib/etcd-agent"); err != nil {
		t.Fatalf("a gate on this state dir (a trailing slash): %v", err)
	}
	for _, c := range []struct {
		name     string
		g        PodGate
		stateDir string
		want     string
	}{
		{"not wrapped", PodGate{StateDir: "/s", MemberSource: "pods"}, "", "does not run etcd through the start gate"},
		{"no state dir", PodGate{Wrapped: true, MemberSource: "pods"}, "", "no --state-dir"},
		{"another state dir", ok, "/other", "not this agent's /other"},
		{"not for pods", PodGate{Wrapped: true, StateDir: "/s", MemberSource: "static"}, "", "lacks --member-source=pods"},
	} {
		if err := PodGateHolds(c.g, c.stateDir); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
		}
	}
}

func TestOnlyItsOwnStatefulSetRecreatesAPod(t *testing.T) {
	sts := &PodOwner{Kind: "StatefulSet", APIVersion: "apps/v1", Name: "etcd", UID: "u1"}
	if why := NotAStatefulSetPod(sts); why != "" {
		t.Fatalf("a StatefulSet's pod: %s", why)
	}
	for _, o := range []*PodOwner{nil, {Kind: "ReplicaSet", APIVersion: "apps/v1", Name: "x"}, {Kind: "StatefulSet", APIVersion: "apps.kruise.io/v1beta1", Name: "x"}} {
		if NotAStatefulSetPod(o) == "" {
			t.Errorf("owner %+v: re-created by a StatefulSet, want why not", o)
		}
	}
	if why := StatefulSetNotTheOwner(*sts, true, "u1"); why != "" {
		t.Fatalf("its own StatefulSet: %s", why)
	}
	if !strings.Contains(StatefulSetNotTheOwner(*sts, false, ""), "is gone") || !strings.Contains(StatefulSetNotTheOwner(*sts, true, "u2"), "not the pod's controller") {
		t.Errorf("a StatefulSet gone or re-created under the name is not the owner")
	}
}

func TestTemplateUngatedUnlessPodAndTemplateComeBackGated(t *testing.T) {
	gated := PodGate{Wrapped: true, StateDir: "/s", MemberSource: "pods"}
	ok := PodTemplate{StatefulSet: "etcd", CurrentRevision: "r1", UpdateRevision: "r2", PodRevision: "r1", PodGate: gated, TemplateGate: gated}
	if why := TemplateUngated(ok); why != "" {
		t.Fatalf("a gated pod and template mid-rollout: %s", why)
	}
	with := func(f func(*PodTemplate)) PodTemplate { t := ok; f(&t); return t }
	for _, c := range []struct {
		name string
		t    PodTemplate
		want string
	}{
		{"a pod of neither revision", with(func(t *PodTemplate) { t.PodRevision = "r0" }), "is rolling out"},
		{"the pod ungated", with(func(t *PodTemplate) { t.PodGate = PodGate{} }), "the pod: "},
		{"the template ungated", with(func(t *PodTemplate) { t.TemplateGate.MemberSource = "" }), "its StatefulSet etcd's template: "},
		{"the template unreadable", with(func(t *PodTemplate) { t.TemplateGateErr = errors.New("two etcd containers") }), "two etcd containers"},
	} {
		if why := TemplateUngated(c.t); !strings.Contains(why, c.want) {
			t.Errorf("%s: %q, want %q", c.name, why, c.want)
		}
	}
}

func TestAPodWhoseDataMovedIsNotStopped(t *testing.T) {
	began := PodData{DataDir: "/pv/1", PVC: "data-etcd-0", PVCUID: "c1"}
	refusedFor := func(err error, want Reason) bool { r, ok := RefusalOf(err); return ok && r.Reason == want }
	if err := SameData(began, began); err != nil {
		t.Fatalf("same data: %v", err)
	}
	if err := SameData(began, PodData{DataDir: "/pv/1", PVC: "data-etcd-0", PVCUID: "c2"}); !refusedFor(err, ReasonMemberDataMoved) {
		t.Errorf("a new claim of the same name: %v, want member-data-moved", err)
	}
	if err := ClaimKept(began, "c1", false); err != nil {
		t.Fatalf("the claim kept: %v", err)
	}
	if err := ClaimKept(began, "c1", true); !refusedFor(err, ReasonMemberDataMoved) {
		t.Errorf("the claim being deleted: %v, want member-data-moved", err)
	}
	if err := TemplateKeepsData("etcd", "/pv/1", "/pv/1"); err != nil {
		t.Fatalf("the template keeps the data: %v", err)
	}
	if err := TemplateKeepsData("etcd", "/pv/2", "/pv/1"); !refusedFor(err, ReasonMemberDataMoved) {
		t.Errorf("a template mounting another path: %v, want member-data-moved", err)
	}
	if err := NotRecreatedGated("no controller"); !refusedFor(err, ReasonNotGated) {
		t.Errorf("a bare pod: %v, want not-gated", err)
	}
}
