package main

import (
	"archive/tar"
	"encoding/json"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"reflect"
	"runtime"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// fakeBins writes small stand-ins for the binaries, with a host mode and
// mtime the images must not copy.
func fakeBins(t *testing.T) (binDir, pause string) {
	t.Helper()
	binDir = t.TempDir()
	for _, n := range []string{"etcd-agent", "etcd", "etcdctl", "etcdutl", "pause"} {
		p := filepath.Join(binDir, n)
		if err := os.WriteFile(p, []byte("#!fake "+n+"\n"), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(p, time.Now(), time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	return binDir, filepath.Join(binDir, "pause")
}

// build writes every spec to a temp dir and returns archive paths by name.
func build(t *testing.T, binDir, pause string) map[string]string {
	t.Helper()
	out := t.TempDir()
	got := map[string]string{}
	for _, s := range specs(binDir, pause) {
		if _, err := write(s, out); err != nil {
			t.Fatal(err)
		}
		got[s.name] = filepath.Join(out, s.name+".tar")
	}
	return got
}

type file struct {
	mode fs.FileMode
	data string // regular files only
}

// readBack loads an archive as the node's importer would see it: its repo
// tags, the image's config and its layer's files.
func readBack(t *testing.T, p string) ([]string, *v1.ConfigFile, map[string]file) {
	t.Helper()
	m, err := tarball.LoadManifest(func() (io.ReadCloser, error) { return os.Open(p) })
	if err != nil {
		t.Fatal(err)
	}
	if len(m) != 1 {
		t.Fatalf("%s: %d images, want 1", p, len(m))
	}
	img, err := tarball.ImageFromPath(p, nil)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	layers, err := img.Layers()
	if err != nil || len(layers) != 1 {
		t.Fatalf("%s: layers %d, %v; want 1", p, len(layers), err)
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	files := map[string]file{}
	var names []string
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if !h.ModTime.Equal(time.Unix(0, 0)) || h.Uid != 0 || h.Gid != 0 {
			t.Errorf("%s %s: mtime %v uid %d gid %d, want epoch 0 and root", p, h.Name, h.ModTime, h.Uid, h.Gid)
		}
		b, _ := io.ReadAll(tr)
		files[strings.TrimSuffix(h.Name, "/")] = file{mode: h.FileInfo().Mode(), data: string(b)}
		names = append(names, strings.TrimSuffix(h.Name, "/"))
	}
	if !sort.StringsAreSorted(names) {
		t.Errorf("%s: entries not sorted: %v", p, names)
	}
	return m[0].RepoTags, cf, files
}

func TestImagesReadBack(t *testing.T) {
	binDir, pause := fakeBins(t)
	archives := build(t, binDir, pause)
	dir := fs.ModeDir | 0o755
	base := map[string]file{
		"etc": {mode: dir}, "etc/passwd": {mode: 0o644, data: string(passwd)}, "etc/group": {mode: 0o644, data: string(group)},
		"tmp": {mode: fs.ModeDir | fs.ModeSticky | 0o777},
		"usr": {mode: dir}, "usr/local": {mode: dir}, "usr/local/bin": {mode: dir},
	}
	withBins := func(names ...string) map[string]file {
		m := map[string]file{}
		for k, v := range base {
			m[k] = v
		}
		for _, n := range names {
			m["usr/local/bin/"+n] = file{mode: 0o755, data: "#!fake " + n + "\n"}
		}
		return m
	}
	for _, tc := range []struct {
		name, ref string
		config    v1.Config
		files     map[string]file
	}{
		{"etcd-agent", "etcd-agent.invalid/etcd-agent:lab", v1.Config{
			Entrypoint: []string{"/usr/local/bin/etcd-agent"}, Cmd: []string{"run"}, User: "0:0",
			ExposedPorts: map[string]struct{}{"9793/tcp": {}}, WorkingDir: "/",
			Env: []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
		}, withBins("etcd-agent")},
		{"etcd", "etcd-agent.invalid/etcd:lab", v1.Config{
			Env: []string{"PATH=/usr/local/bin:/usr/bin:/bin"}, WorkingDir: "/",
			ExposedPorts: map[string]struct{}{"2379/tcp": {}, "2380/tcp": {}},
		}, withBins("etcd", "etcdctl", "etcdutl")},
		{"pause", "etcd-agent.invalid/pause:lab", v1.Config{Entrypoint: []string{"/pause"}, WorkingDir: "/"},
			map[string]file{"pause": {mode: 0o755, data: "#!fake pause\n"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tags, cf, files := readBack(t, archives[tc.name])
			if !reflect.DeepEqual(tags, []string{tc.ref}) {
				t.Errorf("repo tags %v, want [%s]", tags, tc.ref)
			}
			if cf.OS != "linux" || cf.Architecture != runtime.GOARCH || !cf.Created.Equal(time.Unix(0, 0)) {
				t.Errorf("os %q arch %q created %v, want linux %s epoch", cf.OS, cf.Architecture, cf.Created, runtime.GOARCH)
			}
			if !reflect.DeepEqual(cf.Config, tc.config) {
				t.Errorf("config\n got %+v\nwant %+v", cf.Config, tc.config)
			}
			if !reflect.DeepEqual(files, tc.files) {
				t.Errorf("files\n got %v\nwant %v", files, tc.files)
			}
		})
	}
}

// TestSameInputsSameDigest: with TestImagesReadBack's fixed times (Unix 0, not
// the package's epoch, which a time.Now() would keep constant within one run),
// the image is a function of the binaries only.
func TestSameInputsSameDigest(t *testing.T) {
	binDir, pause := fakeBins(t)
	digests := func() map[string]v1.Hash {
		out := t.TempDir()
		m := map[string]v1.Hash{}
		for _, s := range specs(binDir, pause) {
			d, err := write(s, out)
			if err != nil {
				t.Fatal(err)
			}
			m[s.name] = d
		}
		return m
	}
	first := digests()
	// The host's mtime and mode are not the image's.
	agent := filepath.Join(binDir, "etcd-agent")
	if err := os.Chtimes(agent, time.Now().Add(time.Hour), time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(agent, 0o755); err != nil {
		t.Fatal(err)
	}
	if again := digests(); !reflect.DeepEqual(first, again) {
		t.Fatalf("same inputs, other digests:\n%v\n%v", first, again)
	}
	if err := os.WriteFile(agent, []byte("another build"), 0o755); err != nil {
		t.Fatal(err)
	}
	changed := digests()
	if changed["etcd-agent"] == first["etcd-agent"] || changed["etcd"] != first["etcd"] {
		t.Fatalf("a new etcd-agent binary: etcd-agent %s -> %s, etcd %s -> %s",
			first["etcd-agent"], changed["etcd-agent"], first["etcd"], changed["etcd"])
	}
}

// dockerfileFinal is the config the repo's Dockerfile's final stage gives the
// agent's image, and where it copies the binary.
type dockerfileFinal struct {
	from            string
	entrypoint, cmd []string
	user            string
	exposed         map[string]struct{}
	binary          string
}

func parseDockerfile(t *testing.T, p string) dockerfileFinal {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	// Instructions: comments dropped, continuation lines joined.
	var ins []string
	cur := ""
	for _, l := range strings.Split(string(b), "\n") {
		l = strings.TrimSpace(l)
		if strings.HasPrefix(l, "#") || (l == "" && cur == "") {
			continue
		}
		if strings.HasSuffix(l, "\\") {
			cur += strings.TrimSuffix(l, "\\") + " "
			continue
		}
		ins = append(ins, strings.TrimSpace(cur+l))
		cur = ""
	}
	last := -1
	for i, in := range ins {
		if strings.EqualFold(strings.Fields(in)[0], "FROM") {
			last = i
		}
	}
	if last < 0 {
		t.Fatalf("%s: no FROM", p)
	}
	exec := func(kw, arg string) []string {
		var v []string
		if err := json.Unmarshal([]byte(arg), &v); err != nil {
			t.Fatalf("%s %s: not the exec (JSON) form, which distroless (no shell) needs: %v", kw, arg, err)
		}
		return v
	}
	var d dockerfileFinal
	for _, in := range ins[last:] {
		kw, arg, _ := strings.Cut(in, " ")
		arg = strings.TrimSpace(arg)
		switch strings.ToUpper(kw) {
		case "FROM":
			d.from = strings.Fields(arg)[0]
		case "ENTRYPOINT":
			d.entrypoint = exec(kw, arg)
		case "CMD":
			d.cmd = exec(kw, arg)
		case "USER":
			d.user = arg
		case "EXPOSE":
			d.exposed = map[string]struct{}{}
			for _, port := range strings.Fields(arg) {
				if !strings.Contains(port, "/") {
					port += "/tcp"
				}
				d.exposed[port] = struct{}{}
			}
		case "COPY":
			var args []string
			for _, a := range strings.Fields(arg) {
				if !strings.HasPrefix(a, "--") {
					args = append(args, a)
				}
			}
			if d.binary != "" || len(args) != 2 {
				t.Fatalf("%s: %q: hack/images knows one COPY of one file, the agent binary", p, in)
			}
			d.binary = args[1]
			if strings.HasSuffix(d.binary, "/") {
				d.binary = path.Join(d.binary, path.Base(args[0]))
			}
		default:
			// ENV, WORKDIR, LABEL, another RUN...: the lab's image would miss it.
			t.Fatalf("%s: %q in the final stage: mirror it in hack/images' etcd-agent spec and in this test", p, in)
		}
	}
	return d
}

// TestNoDriftFromDockerfile: the lab's agent image runs as the shipped one does.
func TestNoDriftFromDockerfile(t *testing.T) {
	d := parseDockerfile(t, "../../Dockerfile")
	if !strings.Contains(d.from, "distroless/static") {
		t.Errorf("Dockerfile's final base %s: hack/images mimics distroless/static (passwd, group, /tmp)", d.from)
	}
	binDir, pause := fakeBins(t)
	_, cf, files := readBack(t, build(t, binDir, pause)["etcd-agent"])
	c := cf.Config
	if !reflect.DeepEqual(c.Entrypoint, d.entrypoint) || !reflect.DeepEqual(c.Cmd, d.cmd) ||
		c.User != d.user || !reflect.DeepEqual(c.ExposedPorts, d.exposed) {
		t.Errorf("hack/images' etcd-agent image: entrypoint %q cmd %q user %q ports %v;\n"+
			"the Dockerfile's: entrypoint %q cmd %q user %q ports %v",
			c.Entrypoint, c.Cmd, c.User, c.ExposedPorts, d.entrypoint, d.cmd, d.user, d.exposed)
	}
	if f, ok := files[strings.TrimPrefix(d.binary, "/")]; !ok || f.mode != 0o755 || f.data != "#!fake etcd-agent\n" {
		t.Errorf("the Dockerfile copies the agent to %s; the lab's image has there %+v (present %v)", d.binary, f, ok)
	}
}

// TestPauseExitsOnSignal builds ./pause as main does and stops it as the
// kubelet does: SIGTERM (or SIGINT) gives exit status 0. Go's runtime catches
// every signal from its start, so nothing shows when pause's own handler is in:
// a signal sent before it kills pause; each try waits longer first.
func TestPauseExitsOnSignal(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "pause")
	if err := buildPause(bin); err != nil {
		t.Fatal(err)
	}
	for _, sig := range []os.Signal{os.Interrupt, syscall.SIGTERM} {
		var err error
		for _, wait := range []time.Duration{100 * time.Millisecond, 500 * time.Millisecond, 2 * time.Second} {
			if err = stopPause(t, bin, sig, wait); err == nil {
				break
			}
		}
		if err != nil {
			t.Errorf("pause after %v: %v, want exit 0", sig, err)
		}
	}
}

func stopPause(t *testing.T, bin string, sig os.Signal, wait time.Duration) error {
	cmd := exec.Command(bin)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(wait)
	if err := cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		return err
	case <-time.After(10 * time.Second):
		cmd.Process.Kill()
		<-done
		t.Fatalf("pause still running 10 s after %v", sig)
		return nil
	}
}

// TestTheDockerfileCopiesEveryDirTheProductBuildsFrom: the image's build
// stage copies every top-level dir of the module that the product's
// packages live in (a package added under a new one, e.g. the embedded
// docs, would fail `docker build` and nothing else).
func TestTheDockerfileCopiesEveryDirTheProductBuildsFrom(t *testing.T) {
	out, err := exec.Command("go", "list", "-C", "../..", "-deps", "-f", "{{if .Module}}{{if .Module.Main}}{{.Dir}}{{end}}{{end}}", "./cmd/etcd-agent").Output()
	if err != nil {
		t.Fatal(err)
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	need := map[string]bool{}
	for _, dir := range strings.Fields(string(out)) {
		rel, err := filepath.Rel(root, dir)
		if err != nil {
			t.Fatal(err)
		}
		need[strings.Split(filepath.ToSlash(rel), "/")[0]] = true
	}
	b, err := os.ReadFile("../../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	copied := map[string]bool{}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 3 && f[0] == "COPY" && !strings.HasPrefix(f[1], "--") {
			for _, src := range f[1 : len(f)-1] {
				copied[strings.TrimSuffix(src, "/")] = true
			}
		}
	}
	if len(need) == 0 {
		t.Fatal("go list named no package of the module")
	}
	for dir := range need {
		if !copied[dir] {
			t.Errorf("the product builds from %s/, which the Dockerfile does not COPY (copied: %v)", dir, copied)
		}
	}
}
