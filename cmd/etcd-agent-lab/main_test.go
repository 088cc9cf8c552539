package main

import (
	"bytes"
	"strings"
	"testing"
)

func execute(args ...string) (string, error) {
	root := newRootCmd()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetArgs(args)
	err := root.Execute()
	return out.String(), err
}

func TestBadInputGivesAClearError(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"bad lab size", []string{"bench", "--sizes", "lots"}, "bad size"},
		{"bad mode", []string{"up", "--mode", "cloud", "--dir", t.TempDir()}, "--mode \"cloud\""},
		{"bad log level", []string{"status", "--log-level", "loud", "--dir", t.TempDir()}, "bad --log-level"},
		{"no lab there", []string{"status", "--dir", t.TempDir()}, "lab.json"},
		{"bad demo db size", []string{"demo", "--db-size", "lots", "--dir", t.TempDir()}, "--db-size: bad size"},
		{"demo db over the quota", []string{"demo", "--db-size", "2GB", "--dir", t.TempDir()}, "at most 1GB"},
		{"link rate with TLS", []string{"bench", "--learner-link-rate", "64MB", "--etcd-tls", "--dir", t.TempDir()}, "not with --etcd-tls"},
		{"bad link rate", []string{"bench", "--learner-link-rate", "slow", "--dir", t.TempDir()}, "--learner-link-rate: bad size"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := execute(tc.args...)
			if err == nil {
				t.Fatalf("no error; output:\n%s", out)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q does not say %q", err, tc.want)
			}
		})
	}
}
