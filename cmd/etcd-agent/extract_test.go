package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// `etcd-agent extract` refuses bad flags and arguments before touching any
// file, and a file that is not an etcd db is a clear error, not a crash.
func TestExtractRejectsBadInputClearly(t *testing.T) {
	// Every flag also reads ETCD_AGENT_<FLAG>; keep the environment out.
	t.Setenv("ETCD_AGENT_DATA_DIR", "")
	t.Setenv("ETCD_AGENT_SNAPSHOT", "")
	dir := t.TempDir()
	garbage := filepath.Join(dir, "garbage.db")
	if err := os.WriteFile(garbage, []byte(strings.Repeat("not bbolt ", 2000)), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no source", []string{"extract"}, "give exactly one of --data-dir or --snapshot"},
		{"both sources", []string{"extract", "--data-dir", dir, "--snapshot", garbage}, "both given"},
		{"bad output", []string{"extract", "--snapshot", garbage, "-o", "wide"}, `bad -o "wide"`},
		{"table is not a format to ask for", []string{"extract", "--snapshot", garbage, "-o", "table"}, `bad -o "table"`},
		{"bad selector", []string{"extract", "--snapshot", garbage, "configmaps/ns/name/extra"}, "want RESOURCE, RESOURCE/NAME or RESOURCE/NAMESPACE/NAME"},
		{"two selectors", []string{"extract", "--snapshot", garbage, "secrets", "configmaps"}, "accepts at most 1 arg"},
		{"missing snapshot", []string{"extract", "--snapshot", filepath.Join(dir, "nope.db")}, "no such file"},
		{"data dir without a db", []string{"extract", "--data-dir", dir}, "member/snap/db"},
		{"not an etcd db", []string{"extract", "--snapshot", garbage, "secrets"}, "not a readable etcd db"},
	} {
		out, err := execute(tc.args...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want an error containing %q\n%s", tc.name, err, tc.want, out)
		}
		if exitCode(err) == 0 {
			t.Errorf("%s: exit code 0", tc.name)
		}
	}
}
