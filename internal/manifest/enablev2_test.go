package manifest

import "testing"

// Issue 40: etcd 3.5's v2 API (--enable-v2, ETCD_ENABLE_V2) keeps data a v3
// snapshot lacks, so the heal must see it in the manifest to refuse
// seeding. Flags win over the environment, as etcd reads them; a bool flag
// given bare, or with a separate token (Go's flag package takes no value
// for a bool there), is on; an unreadable or runtime-only value counts as
// on (seeding is then refused, never wrongly allowed).
func TestEnableV2IsReadFromFlagsAndEnv(t *testing.T) {
	base := []string{"etcd", "--name=n1", "--data-dir=/var/lib/etcd"}
	tests := []struct {
		name string
		argv []string
		env  []string
		want bool
	}{
		{name: "unset", want: false},
		{name: "bare flag", argv: []string{"--enable-v2"}, want: true},
		{name: "bare flag, then another", argv: []string{"--enable-v2", "--logger=zap"}, want: true},
		{name: "single dash", argv: []string{"-enable-v2=true"}, want: true},
		{name: "=true", argv: []string{"--enable-v2=true"}, want: true},
		{name: "=1", argv: []string{"--enable-v2=1"}, want: true},
		{name: "=false", argv: []string{"--enable-v2=false"}, want: false},
		{name: "separate token", argv: []string{"--enable-v2", "false"}, want: true},
		{name: "last flag wins", argv: []string{"--enable-v2=true", "--enable-v2=false"}, want: false},
		{name: "env true", env: []string{"ETCD_ENABLE_V2=true"}, want: true},
		{name: "env TRUE", env: []string{"ETCD_ENABLE_V2=TRUE"}, want: true},
		{name: "env false", env: []string{"ETCD_ENABLE_V2=false"}, want: false},
		{name: "env empty is unset", env: []string{"ETCD_ENABLE_V2="}, want: false},
		{name: "env unreadable", env: []string{"ETCD_ENABLE_V2=yes"}, want: true},
		{name: "flag wins over env", argv: []string{"--enable-v2=false"}, env: []string{"ETCD_ENABLE_V2=true"}, want: false},
		{name: "flag wins over env, on", argv: []string{"--enable-v2"}, env: []string{"ETCD_ENABLE_V2=false"}, want: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := MemberFromArgv(append(append([]string{}, base...), tt.argv...), tt.env)
			if err != nil {
				t.Fatal(err)
			}
			if m.EnableV2 != tt.want {
				t.Errorf("EnableV2 = %v, want %v", m.EnableV2, tt.want)
			}
		})
	}
}

// A manifest's env may say it too, also through a reference to another
// variable; one only known at runtime counts as on.
func TestEnableV2FromAManifest(t *testing.T) {
	pod := func(env string) []byte {
		return []byte(`apiVersion: v1
kind: Pod
metadata: {name: etcd}
spec:
  containers:
  - name: etcd
    command: [etcd, --name=n1, --data-dir=/var/lib/etcd]
    env:
` + env)
	}
	for _, tt := range []struct {
		env  string
		want bool
	}{
		{env: "    - {name: ETCD_ENABLE_V2, value: \"true\"}\n", want: true},
		{env: "    - {name: V2, value: \"true\"}\n    - {name: ETCD_ENABLE_V2, value: \"$(V2)\"}\n", want: true},
		{env: "    - name: ETCD_ENABLE_V2\n      valueFrom: {fieldRef: {fieldPath: metadata.name}}\n", want: true},
		{env: "    - {name: ETCD_ENABLE_V2, value: \"false\"}\n", want: false},
		{env: "    - {name: OTHER, value: \"x\"}\n", want: false},
	} {
		m, err := ParseMember(pod(tt.env))
		if err != nil {
			t.Fatal(err)
		}
		if m.EnableV2 != tt.want {
			t.Errorf("env\n%s: EnableV2 = %v, want %v", tt.env, m.EnableV2, tt.want)
		}
	}
}
