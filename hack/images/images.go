package main

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// epoch is every file's mtime and the config's created time: the same binaries
// give the same image digest, whenever and wherever they are packed.
var epoch = time.Unix(0, 0).UTC()

// entry is one file or directory of an image's single layer.
type entry struct {
	path string // in the image, without the leading "/"
	mode int64  // permission bits, the sticky bit included (tar's c_ISVTX)
	dir  bool
	data []byte // inline content, or
	src  string // a file on the host (a binary from -bin)
}

// spec is one image: its tag, the archive it is written to, its files and config.
type spec struct {
	name   string // archive name without .tar, the -only value
	ref    string
	files  []entry
	config v1.Config
}

const (
	agentRef = "etcd-agent.invalid/etcd-agent:lab"
	etcdRef  = "etcd-agent.invalid/etcd:lab"
	pauseRef = "etcd-agent.invalid/pause:lab"
	// agentBin is where the repo's Dockerfile puts the agent (TestNoDriftFromDockerfile).
	agentBin = "/usr/local/bin/etcd-agent"
)

// Users and groups as in distroless/static, which the Dockerfile's image is built
// on: a uid without a passwd line works, but tools that look the user up do not.
var (
	passwd = []byte("root:x:0:0:root:/root:/sbin/nologin\n" +
		"nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\n" +
		"nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n")
	group = []byte("root:x:0:\nnobody:x:65534:\nnonroot:x:65532:\n")
)

// base is what the distroless-like images have besides their binaries.
func base() []entry {
	return []entry{
		{path: "etc/passwd", mode: 0o644, data: passwd},
		{path: "etc/group", mode: 0o644, data: group},
		{path: "tmp", mode: 0o1777, dir: true},
	}
}

// specs lists the lab node's images (docs/plans/real-node.md section 2): binDir
// holds etcd-agent, etcd, etcdctl, etcdutl; pauseBin is the built pause binary.
func specs(binDir, pauseBin string) []spec {
	bin := func(name string) entry {
		return entry{path: "usr/local/bin/" + name, mode: 0o755, src: filepath.Join(binDir, name)}
	}
	return []spec{
		{
			name:  "etcd-agent",
			ref:   agentRef,
			files: append(base(), bin("etcd-agent")),
			// The Dockerfile's final stage; distroless/static's PATH.
			config: v1.Config{
				Entrypoint:   []string{agentBin},
				Cmd:          []string{"run"},
				User:         "0:0",
				ExposedPorts: map[string]struct{}{"9793/tcp": {}},
				Env:          []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
				WorkingDir:   "/",
			},
		},
		{
			name:  "etcd",
			ref:   etcdRef,
			files: append(base(), bin("etcd"), bin("etcdctl"), bin("etcdutl")),
			// As registry.k8s.io/etcd: no entrypoint, kubeadm's manifest runs
			// `etcd ...` looked up in PATH.
			config: v1.Config{
				Env:          []string{"PATH=/usr/local/bin:/usr/bin:/bin"},
				ExposedPorts: map[string]struct{}{"2379/tcp": {}, "2380/tcp": {}},
				WorkingDir:   "/",
			},
		},
		{
			name:   "pause",
			ref:    pauseRef,
			files:  []entry{{path: "pause", mode: 0o755, src: pauseBin}},
			config: v1.Config{Entrypoint: []string{"/pause"}, WorkingDir: "/"},
		},
	}
}

// withParents adds the directories (0755) the entries' paths need and sorts
// by path: a parent always comes before what it holds.
func withParents(files []entry) []entry {
	have := map[string]bool{}
	for _, f := range files {
		have[f.path] = true
	}
	out := append([]entry(nil), files...)
	for _, f := range files {
		for d := path.Dir(f.path); d != "." && !have[d]; d = path.Dir(d) {
			have[d] = true
			out = append(out, entry{path: d, mode: 0o755, dir: true})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].path < out[j].path })
	return out
}

// layerTar writes the entries as an uncompressed tar in memory: fixed mtimes,
// uid/gid 0, sorted; the host file's own mtime, owner and mode never leak in.
func layerTar(files []entry) ([]byte, error) {
	files = withParents(files)
	var size int64
	for _, f := range files {
		if f.src != "" {
			st, err := os.Stat(f.src)
			if err != nil {
				return nil, err
			}
			if !st.Mode().IsRegular() {
				return nil, fmt.Errorf("%s: not a regular file", f.src)
			}
			size += st.Size()
		}
		size += int64(len(f.data)) + 1024 // header and padding
	}
	var buf bytes.Buffer
	buf.Grow(int(size) + 2048)
	tw := tar.NewWriter(&buf)
	for _, f := range files {
		h := &tar.Header{Name: f.path, Mode: f.mode, ModTime: epoch, Format: tar.FormatUSTAR}
		if f.dir {
			h.Typeflag, h.Name = tar.TypeDir, f.path+"/"
			if err := tw.WriteHeader(h); err != nil {
				return nil, err
			}
			continue
		}
		h.Typeflag = tar.TypeReg
		if f.src == "" {
			h.Size = int64(len(f.data))
			if err := tw.WriteHeader(h); err != nil {
				return nil, err
			}
			if _, err := tw.Write(f.data); err != nil {
				return nil, err
			}
			continue
		}
		if err := copyFile(tw, h, f.src); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func copyFile(tw *tar.Writer, h *tar.Header, src string) error {
	fh, err := os.Open(src)
	if err != nil {
		return err
	}
	defer fh.Close()
	st, err := fh.Stat()
	if err != nil {
		return err
	}
	h.Size = st.Size()
	if err := tw.WriteHeader(h); err != nil {
		return err
	}
	if _, err := io.Copy(tw, fh); err != nil {
		return fmt.Errorf("%s: %w", src, err)
	}
	return nil
}

// image builds one spec: empty.Image, one uncompressed layer, the config.
func image(s spec) (v1.Image, error) {
	b, err := layerTar(s.files)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", s.name, err)
	}
	// Uncompressed: the node imports it once from local disk, and gzip of
	// ~100 MB of binaries would cost seconds of the shared 2 cores per build.
	img, err := mutate.AppendLayers(empty.Image, static.NewLayer(b, types.DockerUncompressedLayer))
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", runtime.GOARCH
	cf.Created = v1.Time{Time: epoch}
	cf.Config = s.config
	cf.History = []v1.History{{Created: v1.Time{Time: epoch}, CreatedBy: "hack/images (docs/plans/real-node.md section 2)"}}
	return mutate.ConfigFile(img, cf)
}

// write builds s and writes it as a docker-save archive dir/<name>.tar, through
// a temporary file: an interrupted run leaves no half archive to import.
func write(s spec, dir string) (v1.Hash, error) {
	img, err := image(s)
	if err != nil {
		return v1.Hash{}, err
	}
	ref, err := name.ParseReference(s.ref)
	if err != nil {
		return v1.Hash{}, err
	}
	dst := filepath.Join(dir, s.name+".tar")
	tmp := dst + ".tmp"
	if err := tarball.MultiRefWriteToFile(tmp, map[name.Reference]v1.Image{ref: img}); err != nil {
		os.Remove(tmp)
		return v1.Hash{}, fmt.Errorf("%s: %w", s.name, err)
	}
	if err := os.Rename(tmp, dst); err != nil {
		return v1.Hash{}, err
	}
	return img.Digest()
}

// pick returns the specs named in only (comma-separated; all when empty).
func pick(all []spec, only string) ([]spec, error) {
	if only == "" {
		return all, nil
	}
	var out []spec
	for _, n := range strings.Split(only, ",") {
		found := false
		for _, s := range all {
			if s.name == n {
				out, found = append(out, s), true
			}
		}
		if !found {
			return nil, fmt.Errorf("-only %s: no such image (etcd-agent, etcd, pause)", n)
		}
	}
	return out, nil
}
