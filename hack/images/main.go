// Command images writes the lab's real node images (docs/plans/real-node.md
// section 2) as docker-save archives, from the static binaries in bin/, with no
// registry and no Docker:
//
//	cd hack/images && go run . -bin ../../bin -out ../../bin/images [-only etcd-agent,etcd,pause]
//
// etcd-agent.tar (etcd-agent.invalid/etcd-agent:lab, the Dockerfile's config),
// etcd.tar (etcd-agent.invalid/etcd:lab) and pause.tar (etcd-agent.invalid/pause:lab,
// ./pause, which this program builds itself with `go build`, CGO_ENABLED=0, so
// it must run inside this module). The node imports them with
// `ctr -n k8s.io images import --snapshotter overlayfs <tar>`. The same inputs
// give the same image digests: fixed mtimes, sorted entries.
package main

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"
)

func main() {
	binDir := flag.String("bin", "../../bin", "dir with etcd-agent, etcd, etcdctl, etcdutl")
	out := flag.String("out", "../../bin/images", "dir the archives are written to")
	only := flag.String("only", "", "comma-separated images to write (etcd-agent, etcd, pause); all when empty")
	flag.Parse()
	if err := run(*binDir, *out, *only); err != nil {
		fmt.Fprintln(os.Stderr, "images:", err)
		os.Exit(1)
	}
}

func run(binDir, out, only string) error {
	tmp, err := os.MkdirTemp("", "images-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	pauseBin := filepath.Join(tmp, "pause")
	todo, err := pick(specs(binDir, pauseBin), only)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	for _, s := range todo {
		if s.name == "pause" {
			if err := buildPause(pauseBin); err != nil {
				return err
			}
		}
		start := time.Now()
		d, err := write(s, out)
		if err != nil {
			return err
		}
		st, err := os.Stat(filepath.Join(out, s.name+".tar"))
		if err != nil {
			return err
		}
		fmt.Printf("%s %s %s %.1f MB %s\n", filepath.Join(out, s.name+".tar"), s.ref, d,
			float64(st.Size())/1e6, time.Since(start).Round(time.Millisecond))
	}
	return nil
}

// buildPause compiles ./pause statically for the image's platform. -trimpath
// and no VCS stamp: the same toolchain gives the same bytes, so the same digest.
func buildPause(dst string) error {
	goCmd := os.Getenv("GO")
	if goCmd == "" {
		goCmd = "go"
	}
	cmd := exec.Command(goCmd, "build", "-trimpath", "-buildvcs=false", "-ldflags=-s -w", "-o", dst, "./pause")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+runtime.GOARCH)
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build ./pause: %v: %s", err, strings.TrimSpace(string(b)))
	}
	return nil
}
