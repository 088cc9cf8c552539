package runbook

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func write(t *testing.T, name, text string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestMarkedBlocksAreAProceduresStepsInOrder(t *testing.T) {
	a := write(t, "a.md", "# A\n\n```sh\nnot marked\n```\n\n```sh runbook=rejoin\necho one\n```\ntext\n```sh runbook=other\necho x\n```\n````\n```sh runbook=fake\ninside a bigger fence\n```\n````\n")
	b := write(t, "b.md", "```bash runbook=rejoin\necho two\necho three\n```\n")
	got, err := Parse(a, b)
	if err != nil {
		t.Fatal(err)
	}
	r := got["rejoin"]
	if len(r) != 2 || r[0].Script != "echo one\n" || r[1].Script != "echo two\necho three\n" || r[0].Line != 7 || r[1].File != b {
		t.Fatalf("rejoin steps %+v", r)
	}
	if len(got["other"]) != 1 || len(got) != 2 {
		t.Fatalf("procedures %v: want rejoin and other only (a fence inside a longer one is text)", got)
	}
}

func TestABrokenMarkerIsAnError(t *testing.T) {
	for name, text := range map[string]string{
		"unnamed":    "```sh runbook=\necho\n```\n",
		"not shell":  "```yaml runbook=x\na: b\n```\n",
		"not closed": "```sh runbook=x\necho\n",
	} {
		if _, err := Parse(write(t, "x.md", text)); err == nil || !strings.Contains(err.Error(), "x.md:1") {
			t.Errorf("%s: got %v, want an error at x.md:1", name, err)
		}
	}
}

// A procedure runs under set -e, which a command negated with a bare `!`
// never stops ("! E endpoint health" passes on a healthy cluster too):
// such a check must be written "(! cmd)", and a bare one is an error.
func TestABareNegatedCheckIsAnError(t *testing.T) {
	_, err := Parse(write(t, "x.md", "```sh runbook=x\necho\n  ! E endpoint health\n```\n"))
	if err == nil || !strings.Contains(err.Error(), "x.md:3") || !strings.Contains(err.Error(), "(! ") {
		t.Fatalf("got %v, want an error at x.md:3 saying to write (! cmd)", err)
	}
	got, err := Parse(write(t, "y.md", "```sh runbook=y\n(! E endpoint health)\nfoo ! bar\n```\n"))
	if err != nil || len(got["y"]) != 1 {
		t.Fatalf("a subshell-wrapped negation: %v %v", got, err)
	}
}
