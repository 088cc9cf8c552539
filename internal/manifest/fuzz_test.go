package manifest

import (
	"bytes"
	"encoding/json"
	"os"
	"path"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// The static-pod manifest is written by kubeadm, OpenShift or a person,
// and a member pod's spec by whoever made its StatefulSet: these targets
// fuzz what the agent reads from them. Seeds are the package's test
// manifests (testdata/ and the tests' own); crashers found are kept in
// testdata/fuzz/<target>/.

// manifestSeeds are real manifests from this package's tests.
func manifestSeeds(f *testing.F) [][]byte {
	f.Helper()
	seeds := [][]byte{[]byte(wrapped), []byte(hostedPodYAML(f))}
	files, err := filepath.Glob("testdata/*.yaml")
	if err != nil || len(files) == 0 {
		f.Fatalf("no testdata manifests: %v", err)
	}
	for _, name := range files {
		b, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		seeds = append(seeds, b)
	}
	for _, c := range []string{
		"  - name: etcd\n    command: [etcd, --name, m1, --data-dir, /data, --client-cert-auth, --advertise-client-urls, \"https://a:2379, https://b:2379\"]\n",
		"  - name: etcd\n    command: [/usr/local/bin/etcd, -name=m1, -data-dir, /data]\n",
		"  - name: etcd\n    command: [etcd, --name=m1]\n    args: [--data-dir=/data, --initial-cluster-token=tok]\n",
		"  - name: etcd\n    args: [--name=m1, --data-dir=/data]\n",
		"  - name: etcd\n    command: [etcd, --data-dir=/flag]\n    env: [{name: ETCD_DATA_DIR, value: /env}, {name: ETCD_NAME, value: m1}]\n",
		"  - name: etcd\n    command: [etcd, \"--name=$(HOST)\", \"--data-dir=/data/$$(HOST)\", \"--initial-cluster-token=$(UNDEFINED)\"]\n    env: [{name: HOST, value: cp-1}]\n",
		"  - name: proxy\n    command: [etcd, grpc-proxy, start]\n  - name: etcd\n    command: [/bin/sh, -c, \"exec etcd\"]\n    env: [{name: ETCD_NAME, value: m1}, {name: ETCD_DATA_DIR, value: /data}]\n",
		"  - name: etcd\n    command: [etcd, --name=$(NODE), --data-dir=/data, --enable-v2]\n    env: [{name: NODE, valueFrom: {fieldRef: {fieldPath: spec.nodeName}}}]\n",
	} {
		seeds = append(seeds, pod(c))
	}
	return seeds
}

// hostedPodYAML is hostedPod (a StatefulSet member with downward-API env)
// as a manifest.
func hostedPodYAML(f *testing.F) string {
	p := hostedPod()
	p.APIVersion, p.Kind = "v1", "Pod"
	b, err := json.Marshal(p)
	if err != nil {
		f.Fatal(err)
	}
	return string(b)
}

// identityFlags are the flags memberOf reads.
var identityFlags = []string{"name", "data-dir", "wal-dir", "advertise-client-urls", "initial-advertise-peer-urls",
	"listen-client-urls", "listen-metrics-urls", "listen-client-http-urls", "initial-cluster", "initial-cluster-state",
	"initial-cluster-token", "cert-file", "key-file", "trusted-ca-file", "peer-cert-file", "peer-key-file",
	"peer-trusted-ca-file", "enable-v2"}

// FuzzParseMember: an accepted manifest names a member (name and data
// dir), its hostPath mounts are clean absolute paths, the Pod re-encoded
// reads as the same member, and a member pod read as the kubelet would run
// it (MemberOfPod) is the same member wherever $(VAR) expansion does not
// change the shape of the command line.
func FuzzParseMember(f *testing.F) {
	for _, s := range manifestSeeds(f) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := ParseMember(data)
		if err != nil {
			return
		}
		if m.Name == "" || m.DataDir == "" {
			t.Fatalf("accepted a member without name or data dir: %+v", m)
		}
		for _, mnt := range m.HostMounts {
			if !path.IsAbs(mnt.ContainerPath) || path.Clean(mnt.ContainerPath) != mnt.ContainerPath {
				t.Fatalf("mount %+v: container path not clean and absolute", mnt)
			}
		}
		if hp, ok := m.HostPath(m.DataDir); ok && path.Clean(hp) != hp {
			t.Fatalf("HostPath(%q) = %q: not clean", m.DataDir, hp)
		}

		pod, err := decodePod(data)
		if err != nil {
			t.Fatalf("ParseMember accepted what decodePod refuses: %v", err)
		}
		again, err := json.Marshal(pod)
		if err != nil {
			t.Fatal(err)
		}
		m2, err := ParseMember(again)
		if err != nil {
			t.Fatalf("the re-encoded pod is refused: %v\n%s", err, again)
		}
		if !reflect.DeepEqual(m, m2) {
			t.Fatalf("re-encoded pod reads differently:\n got  %+v\n want %+v", m2, m)
		}

		idx, _ := findEtcdContainer(pod)
		c := pod.Spec.Containers[idx]
		if !plainEnv(c) {
			return
		}
		fields := PodFields{Name: "n", Namespace: "ns", UID: "u", NodeName: "node", ServiceAccount: "sa", PodIP: "10.0.0.1", HostIP: "10.0.0.2"}
		env, err := RuntimeEnv(c, fields)
		if err != nil {
			t.Fatalf("RuntimeEnv of plain env: %v", err)
		}
		raw := append(append([]string{}, c.Command...), c.Args...)
		if !sameShape(raw, env.Argv(c)) {
			return
		}
		pm, _, argv, err := MemberOfPod(pod, fields)
		if err != nil {
			t.Fatalf("ParseMember accepts, MemberOfPod refuses: %v", err)
		}
		if !slices.Equal(argv, env.Argv(c)) {
			t.Fatalf("MemberOfPod argv %q, want %q", argv, env.Argv(c))
		}
		pm.HostMounts = m.HostMounts // MemberOfPod leaves them to the caller
		if !reflect.DeepEqual(m, pm) {
			t.Fatalf("MemberOfPod reads another member:\n got  %+v\n want %+v", pm, m)
		}
	})
}

// plainEnv: only literal env values (no valueFrom, envFrom), with names
// the API accepts (no "=").
func plainEnv(c corev1.Container) bool {
	if len(c.EnvFrom) > 0 {
		return false
	}
	for _, v := range c.Env {
		if v.ValueFrom != nil || v.Name == "" || strings.Contains(v.Name, "=") {
			return false
		}
	}
	return true
}

// sameShape: expanding $(VAR)s left every token's role as it was (a flag
// stays the same flag, a value a value, the gate and "--" where they were).
// ParseMember reads flags from the tokens as written; where expansion makes
// a flag out of a value, it cannot agree with the kubelet, by design.
func sameShape(raw, expanded []string) bool {
	if len(raw) != len(expanded) {
		return false
	}
	role := func(tok string) string {
		if tok == "--" || tok == GateSubcommand || path.Base(tok) == "etcd" {
			return tok
		}
		if strings.HasPrefix(tok, "-") {
			name, _, _ := strings.Cut(tok, "=")
			return name
		}
		return ""
	}
	for i := range raw {
		if role(raw[i]) != role(expanded[i]) {
			return false
		}
	}
	return true
}

// etcdFlagName is the form etcd's flag names have; only such names are set.
var etcdFlagName = regexp.MustCompile(`^[a-z0-9][a-z0-9-]*$`)

// FuzzSetFlags: SetFlags either refuses or returns a manifest in which etcd
// sees exactly the value set (for a flag name of etcd's form), every other flag and ETCD_* variable as
// written before, the other containers untouched; setting it again
// changes nothing. It never fails with an internal error.
func FuzzSetFlags(f *testing.F) {
	for _, s := range manifestSeeds(f) {
		f.Add(s, "initial-cluster-state", "existing")
		f.Add(s, "initial-cluster", "a=https://10.0.0.1:2380,b=https://10.0.0.2:2380")
		f.Add(s, "initial-cluster-token", "$(TOKEN) and $$")
	}
	f.Fuzz(func(t *testing.T, data []byte, name, value string) {
		out, err := SetFlags(data, map[string]string{name: value})
		if err != nil {
			if strings.Contains(err.Error(), "internal error") {
				t.Fatalf("SetFlags(%q=%q): %v", name, value, err)
			}
			return
		}
		if !etcdFlagName.MatchString(name) {
			return // the agent sets etcd's own flags only; the manifest is what others write
		}
		before, _ := decodePod(data)
		after, err := decodePod(out)
		if err != nil {
			t.Fatalf("the rewritten manifest is not a Pod: %v\n%s", err, out)
		}
		bi, _ := findEtcdContainer(before)
		ai, err := findEtcdContainer(after)
		if err != nil || ai != bi || len(after.Spec.Containers) != len(before.Spec.Containers) {
			t.Fatalf("etcd container #%d became #%d (%v) of %d", bi, ai, err, len(after.Spec.Containers))
		}
		bc, ac := before.Spec.Containers[bi], after.Spec.Containers[ai]
		if got, err := newEtcdConfig(ac).Value(name); err != nil || got != value {
			t.Fatalf("--%s reads %q (%v), want %q", name, got, err, value)
		}
		for i := range before.Spec.Containers {
			if i != bi && !reflect.DeepEqual(before.Spec.Containers[i], after.Spec.Containers[i]) {
				t.Fatalf("container #%d changed", i)
			}
		}
		bf, af := scanFlags(argvOf(bc)), scanFlags(argvOf(ac))
		for _, flag := range identityFlags {
			if flag == name {
				continue
			}
			b, bok := lastFlag(bf, flag)
			a, aok := lastFlag(af, flag)
			if bok != aok || b.value != a.value {
				t.Fatalf("setting --%s changed --%s from %q to %q", name, flag, b.value, a.value)
			}
		}
		if !sameEnvBut(bc.Env, ac.Env, envKey(name)) {
			t.Fatalf("setting --%s changed other variables:\n%v\n%v", name, bc.Env, ac.Env)
		}
		twice, err := SetFlags(out, map[string]string{name: value})
		if err != nil || !bytes.Equal(twice, out) {
			t.Fatalf("setting the flag again: %v\n%s\nthen\n%s", err, out, twice)
		}
	})
}

func argvOf(c corev1.Container) []string { return append(append([]string{}, c.Command...), c.Args...) }

// sameEnvBut: a and b differ at most in the value of key.
func sameEnvBut(a, b []corev1.EnvVar, key string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		x, y := a[i], b[i]
		if x.Name == key && y.Name == key {
			x.Value, y.Value = "", ""
		}
		if !reflect.DeepEqual(x, y) {
			return false
		}
	}
	return true
}

// splitArgv is a fuzzer string as a command line: NUL-separated tokens.
func splitArgv(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, "\x00")
}

// FuzzArgv fuzzes the start gate's side: the command line it wraps and
// execs (MemberFromArgv, GateFlag, SetArgvFlags). The inputs are never
// modified; a flag SetArgvFlags sets is one etcd then sees, with every
// other flag as before; GateFlag answers only on a gate-wrapped line.
func FuzzArgv(f *testing.F) {
	j := strings.Join
	f.Add(j([]string{"/opt/etcd-agent/etcd-agent", "gate", "--state-dir=/var/lib/etcd-agent", "--endpoints", "https://10.0.0.2:2379", "--",
		"etcd", "--name=cp1", "--data-dir=/var/lib/etcd", "--initial-cluster-state", "new"}, "\x00"),
		"ETCD_INITIAL_CLUSTER_TOKEN=t1\x00PATH=/bin", "initial-cluster-state", "existing")
	f.Add(j([]string{"/bin/etcd", "--name=a", "--initial-cluster-state", "new", "-initial-cluster=a=http://x:2380"}, "\x00"),
		"PATH=/bin\x00ETCD_INITIAL_CLUSTER_TOKEN=t1\x00ETCD_DATA_DIR=/data/$(x)", "initial-cluster-token", "t2")
	f.Add(j([]string{"etcd", "--enable-v2", "--name", "m"}, "\x00"), "ETCD_DATA_DIR=/d", "snapshot-count", "5")
	f.Fuzz(func(t *testing.T, argvS, envS, name, value string) {
		argv, environ := splitArgv(argvS), splitArgv(envS)
		argv0, environ0 := slices.Clone(argv), slices.Clone(environ)

		for _, flag := range []string{"state-dir", "endpoints", "member-source"} {
			if _, ok := GateFlag(argv, flag); ok && etcdArgvStart(argv) < 3 {
				t.Fatalf("GateFlag(%q) answered on a line that is not gate-wrapped: %q", flag, argv)
			}
		}
		if m, err := MemberFromArgv(argv, environ); err == nil && (m.Name == "" || m.DataDir == "") {
			t.Fatalf("accepted a member without name or data dir: %+v", m)
		}

		out, outEnv, err := SetArgvFlags(argv, environ, map[string]string{name: value})
		if !slices.Equal(argv, argv0) || !slices.Equal(environ, environ0) {
			t.Fatalf("SetArgvFlags modified its inputs: %q %q", argv, environ)
		}
		if err != nil || !etcdFlagName.MatchString(name) {
			return
		}
		before, after := argvConfig(argv, environ), argvConfig(out, outEnv)
		if got, err := after.Value(name); err != nil || got != value {
			t.Fatalf("after setting --%s=%q etcd sees %q (%v): %q %q", name, value, got, err, out, outEnv)
		}
		for _, flag := range identityFlags {
			if flag == name {
				continue
			}
			b, _ := before.Value(flag)
			a, _ := after.Value(flag)
			if a != b {
				t.Fatalf("setting --%s changed --%s from %q to %q: %q", name, flag, b, a, out)
			}
		}
	})
}

// argvConfig is what etcd sees when exec'd with argv and environ (as
// MemberFromArgv reads them).
func argvConfig(argv, environ []string) etcdConfig {
	c := corev1.Container{Name: EtcdContainerName}
	for _, tok := range argv {
		c.Command = append(c.Command, escapeExpansion(tok))
	}
	for _, kv := range environ {
		if k, v, ok := strings.Cut(kv, "="); ok && strings.HasPrefix(k, "ETCD_") {
			c.Env = append(c.Env, corev1.EnvVar{Name: k, Value: escapeExpansion(v)})
		}
	}
	return newEtcdConfig(c)
}
