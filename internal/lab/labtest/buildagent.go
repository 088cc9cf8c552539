package labtest

import (
	"bufio"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// BuildAgent builds the agent the tests run and ./cmd/etcd-agent-lab (the
// lab's supervisor) into dir, so a lab never runs a stale binary; it returns
// the agent's path, which the lab finds etcd-agent-lab beside.
//
// The agent carries its test hooks (internal/heal/testhooks.go): etcd's
// failpoints, enabled with bin/gofail (make tools) on a copy of the tree,
// with go.etcd.io/gofail required there only. The product's go.mod and
// binary have neither (docs/design.md, "Test hooks"); a lab turns a hook on
// through the agents' GOFAIL_FAILPOINTS (lab.Options.Failpoints).
func BuildAgent(root, dir string) (string, error) {
	lab := exec.Command("go", "build", "-o", filepath.Join(dir, "etcd-agent-lab"), "./cmd/etcd-agent-lab")
	lab.Dir = root
	if out, err := lab.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build etcd-agent-lab: %v\n%s", err, out)
	}
	src := filepath.Join(dir, "agent-with-failpoints")
	defer os.RemoveAll(src)
	if err := copySources(root, src); err != nil {
		return "", fmt.Errorf("copy the tree for the failpoint build: %w", err)
	}
	version, sums, err := gofailModule(root)
	if err != nil {
		return "", err
	}
	agent := filepath.Join(dir, "etcd-agent")
	for _, step := range [][]string{
		{filepath.Join(root, "bin", "gofail"), "enable", "./internal/heal"},
		{"go", "mod", "edit", "-require=go.etcd.io/gofail@" + version},
		// -trimpath: the copy's folder is new each time, its packages not.
		{"go", "build", "-trimpath", "-o", agent, "./cmd/etcd-agent"},
	} {
		if step[0] == "go" && step[1] == "build" {
			if err := appendFile(filepath.Join(src, "go.sum"), sums); err != nil {
				return "", err
			}
		}
		cmd := exec.Command(step[0], step[1:]...)
		cmd.Dir = src
		if out, err := cmd.CombinedOutput(); err != nil {
			return "", fmt.Errorf("build the agent with its failpoints: %s: %v\n%s", strings.Join(step, " "), err, out)
		}
	}
	return agent, nil
}

// copySources copies what ./cmd/etcd-agent is built from (the root
// module's non-test Go files, go.mod, go.sum and docs, which it embeds).
func copySources(root, dst string) error {
	for _, f := range []string{"go.mod", "go.sum"} {
		if err := copyFile(filepath.Join(root, f), filepath.Join(dst, f)); err != nil {
			return err
		}
	}
	for _, dir := range []string{"cmd", "internal", "metrics", "docs"} {
		err := filepath.WalkDir(filepath.Join(root, dir), func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			rel, err := filepath.Rel(root, p)
			if err != nil {
				return err
			}
			switch {
			case d.IsDir() && d.Name() == "testdata":
				return filepath.SkipDir
			case d.IsDir(), strings.HasSuffix(p, "_test.go"):
				return nil
			}
			return copyFile(p, filepath.Join(dst, rel))
		})
		if err != nil {
			return err
		}
	}
	return nil
}

func copyFile(from, to string) error {
	b, err := os.ReadFile(from)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
		return err
	}
	return os.WriteFile(to, b, 0o644)
}

func appendFile(path string, b []byte) error {
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

// gofailModule is the gofail version hack/tools/gofail pins (bin/gofail's)
// and its go.sum lines, for the copy's go.mod.
func gofailModule(root string) (version string, sums []byte, err error) {
	dir := filepath.Join(root, "hack", "tools", "gofail")
	f, err := os.Open(filepath.Join(dir, "go.mod"))
	if err != nil {
		return "", nil, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if fields := strings.Fields(sc.Text()); len(fields) >= 2 && fields[0] == "go.etcd.io/gofail" {
			version = fields[1]
		}
	}
	if version == "" {
		return "", nil, fmt.Errorf("%s/go.mod pins no go.etcd.io/gofail", dir)
	}
	if _, err := os.Stat(filepath.Join(root, "bin", "gofail")); err != nil {
		return "", nil, fmt.Errorf("bin/gofail missing: run `make tools` first (the agent the tests run is built with its failpoints)")
	}
	sums, err = os.ReadFile(filepath.Join(dir, "go.sum"))
	return version, sums, err
}
