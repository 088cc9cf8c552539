package memberruntime

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"github.com/etcd-agent/etcd-agent/internal/fsutil"

	"github.com/etcd-agent/etcd-agent/internal/manifest"
	"go.uber.org/zap"
)

// staticPod runs the member as a kubelet static pod.
type staticPod struct {
	manifestPath string // in the kubelet's manifests dir
	parkDir      string
	parkedPath   string // parkDir/<manifest file name>
	urls         []string
	stopWait     waitLimits
	log          *zap.Logger

	mu sync.Mutex // one Stop/Start at a time: both move the same files
}

// NewStaticPod returns the static-pod runtime. Stop moves manifestPath (in
// the kubelet's manifests dir) into parkDir, e.g. <state-dir>/parked, so the
// kubelet stops etcd; Start puts it back with the rejoin flags. parkDir
// should be on the manifests dir's filesystem (the move is then one atomic
// rename); otherwise the manifest is copied and fsynced before the original
// is removed. listenURLs are the member's client and peer URLs, used to see that the
// process is gone.
func NewStaticPod(manifestPath, parkDir string, listenURLs []string, log *zap.Logger, opts ...Option) Runtime {
	if log == nil {
		log = zap.NewNop()
	}
	return &staticPod{
		manifestPath: manifestPath,
		parkDir:      parkDir,
		parkedPath:   filepath.Join(parkDir, filepath.Base(manifestPath)),
		urls:         listenURLs,
		stopWait:     limits(opts),
		log:          log.With(zap.String("runtime", "static-pod"), zap.String("manifest", manifestPath)),
	}
}

func (s *staticPod) Describe() string {
	return fmt.Sprintf("static-pod: manifest %s, parked at %s while stopped", s.manifestPath, s.parkedPath)
}

// where says which copies of the manifest exist.
func (s *staticPod) where() (live, parked bool, err error) {
	live, err = exists(s.manifestPath)
	if err != nil {
		return false, false, err
	}
	parked, err = exists(s.parkedPath)
	return live, parked, err
}

// ErrNoManifest: the static pod's manifest is neither in the kubelet's dir
// nor parked by the agent (removed by hand, or by accident).
var ErrNoManifest = errors.New("no etcd static-pod manifest")

func (s *staticPod) errNoManifest() error {
	return fmt.Errorf("%w: neither at %s nor parked at %s: the agent cannot stop or start etcd without it", ErrNoManifest, s.manifestPath, s.parkedPath)
}

func (s *staticPod) Stopped() (bool, error) {
	live, parked, err := s.where()
	switch {
	case err != nil:
		return false, err
	case live:
		return false, nil
	case parked:
		return true, nil
	default:
		return false, s.errNoManifest()
	}
}

func (s *staticPod) Stop(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	live, parked, err := s.where()
	if err != nil {
		return err
	}
	switch {
	case live:
		// A parked copy next to a live manifest is stale (a crash during an
		// earlier move): the live one is what the kubelet runs, so it wins.
		if err := os.MkdirAll(s.parkDir, 0o700); err != nil {
			return fmt.Errorf("create park dir: %w", err)
		}
		if err := moveFile(s.manifestPath, s.parkedPath); err != nil {
			return fmt.Errorf("park manifest %s in %s: %w", s.manifestPath, s.parkDir, err)
		}
		s.log.Info("parked etcd manifest to stop the member", zap.String("parked", s.parkedPath))
	case parked:
		s.log.Debug("etcd manifest already parked", zap.String("parked", s.parkedPath))
	default:
		return s.errNoManifest()
	}
	if err := waitGone(ctx, s.log, s.stopWait, s.urls, s.hostDataDir(s.parkedPath)); err != nil {
		return fmt.Errorf("manifest parked at %s but etcd has not stopped: %w", s.parkedPath, err)
	}
	s.log.Info("etcd member stopped")
	return nil
}

// hostDataDir returns the member's data dir on the node, from the manifest
// at path, or "" when it cannot be located (Stop then relies on the client
// URL alone).
func (s *staticPod) hostDataDir(path string) string {
	m, err := manifest.LoadMember(path)
	if err != nil {
		s.log.Warn("cannot read the member's data dir from its manifest; checking only its client URL", zap.Error(err))
		return ""
	}
	dir, ok := m.HostPath(m.DataDir)
	if !ok {
		s.log.Warn("data dir is not on a hostPath volume; checking only the client URL", zap.String("dataDir", m.DataDir))
		return ""
	}
	return dir
}

// Start starts the member with the rejoin flags; client URLs an earlier
// start set aside (StartAside) are put back: a member started again (put
// back after a failed attempt, restarted once promoted) serves where its
// manifest always said.
func (s *staticPod) Start(ctx context.Context, initialCluster string) error {
	return s.start(ctx, initialCluster, func(data []byte) ([]byte, error) {
		out, _, err := manifest.RestoreClientURLs(data)
		return out, err
	})
}

// StartAside is Start with the member's client URLs set aside: etcd
// listens for clients only on a free port of its advertised client URL's
// host, which no client was given (manifest.SetClientURLsAside). It
// returns that private URL.
func (s *staticPod) StartAside(ctx context.Context, initialCluster string) (string, error) {
	var private string
	err := s.start(ctx, initialCluster, func(data []byte) ([]byte, error) {
		m, err := manifest.ParseMember(data)
		if err != nil {
			return nil, err
		}
		if len(m.ClientURLs) == 0 {
			return nil, errors.New("the manifest advertises no client URL")
		}
		if private, err = freeURLOn(m.ClientURLs[0]); err != nil {
			return nil, err
		}
		return manifest.SetClientURLsAside(data, private)
	})
	return private, err
}

// ClientURLsAside says whether the member's manifest (live or parked) has
// its client URLs set aside, and the private URL it listens on then.
func (s *staticPod) ClientURLsAside() (string, bool, error) {
	data, err := s.current()
	if errors.Is(err, ErrNoManifest) {
		return "", false, nil
	}
	if err != nil {
		return "", false, err
	}
	a, ok, err := manifest.ClientURLsAsideOf(data)
	return a.Private, ok, err
}
func (s *staticPod) start(ctx context.Context, initialCluster string, edit func([]byte) ([]byte, error)) error {
	if strings.TrimSpace(initialCluster) == "" {
		return errors.New("start: empty --initial-cluster")
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	live, parked, err := s.where()
	if err != nil {
		return err
	}
	src := s.manifestPath
	switch {
	case live:
		// Running already (or a Start crashed after its rename): edit in place.
	case parked:
		src = s.parkedPath
	default:
		return s.errNoManifest()
	}
	data, perm, err := readWithMode(src)
	if err != nil {
		return err
	}
	out, err := withRejoinFlags(data, initialCluster)
	if err == nil {
		out, err = edit(out)
	}
	if err != nil {
		return fmt.Errorf("manifest %s: %w", src, err)
	}
	if live && bytes.Equal(out, data) {
		s.log.Debug("etcd manifest already in place with the rejoin flags")
	} else {
		if err := s.install(out, perm); err != nil {
			return err
		}
		s.log.Info("installed etcd manifest to start the member",
			zap.String("initialCluster", initialCluster), zap.Bool("wasParked", !live))
	}
	if parked {
		if err := os.Remove(s.parkedPath); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("remove parked manifest: %w", err)
		}
		return fsutil.SyncDir(s.parkDir)
	}
	return nil
}

// freeURLOn is u with a port of its host that nobody listens on now: the
// own port + 10000 or one of the next nine (below the ephemeral range on
// the usual 2379, so no outgoing connection takes it before etcd binds
// it), else any free one. The host must be an IP of this node: etcd binds
// only IPs (and localhost).
func freeURLOn(u string) (string, error) {
	pu, err := url.Parse(u)
	if err != nil {
		return "", fmt.Errorf("client URL %q: %w", u, err)
	}
	ip := net.ParseIP(pu.Hostname())
	if ip == nil {
		return "", fmt.Errorf("client URL %q: its host is not an IP (etcd binds only IPs)", u)
	}
	own, _ := strconv.Atoi(pu.Port())
	var ports []int
	if own > 0 && own+10009 <= 65535 {
		for i := range 10 {
			ports = append(ports, own+10000+i)
		}
	}
	ports = append(ports, 0)
	var lerr error
	for _, port := range ports {
		l, err := net.Listen("tcp", net.JoinHostPort(ip.String(), strconv.Itoa(port)))
		if err != nil {
			lerr = err
			continue
		}
		port = l.Addr().(*net.TCPAddr).Port
		l.Close()
		pu.Host, pu.Path = net.JoinHostPort(ip.String(), strconv.Itoa(port)), ""
		return pu.String(), nil
	}
	return "", fmt.Errorf("no free port on %s (not an address of this node?): %w", ip, lerr)
}

// CanSetClientURLsAside says why the member's client URLs could not be set
// aside (nil: they can, or are): both flags written in the manifest, the
// advertised host an IP of this node with a free port.
func (s *staticPod) CanSetClientURLsAside() error {
	data, err := s.current()
	if err != nil {
		return err
	}
	if _, ok, err := manifest.ClientURLsAsideOf(data); ok || err != nil {
		return err
	}
	if _, err := manifest.OwnClientURLs(data); err != nil {
		return err
	}
	m, err := manifest.ParseMember(data)
	if err != nil {
		return err
	}
	if len(m.ClientURLs) == 0 {
		return errors.New("the manifest advertises no client URL")
	}
	_, err = freeURLOn(m.ClientURLs[0])
	return err
}

// current is the member's manifest, live or parked.
func (s *staticPod) current() ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	live, parked, err := s.where()
	if err != nil {
		return nil, err
	}
	switch {
	case live:
		return os.ReadFile(s.manifestPath)
	case parked:
		return os.ReadFile(s.parkedPath)
	}
	return nil, s.errNoManifest()
}

// withRejoinFlags returns data with --initial-cluster-state=existing and
// --initial-cluster=initialCluster, or data itself when it already says so
// (SetFlags re-renders the YAML, which would restart a running member for
// nothing).
func withRejoinFlags(data []byte, initialCluster string) ([]byte, error) {
	m, err := manifest.ParseMember(data)
	if err != nil {
		return nil, err
	}
	if m.InitialCluster == initialCluster && m.InitialClusterState == "existing" {
		return data, nil
	}
	return manifest.SetFlags(data, map[string]string{
		"initial-cluster-state": "existing",
		"initial-cluster":       initialCluster,
	})
}

// install atomically replaces the live manifest with data. The temp file
// must be on the manifests dir's filesystem, so several dirs are tried:
// the park dir, the manifests dir's parent, and finally the manifests dir
// itself under a hidden name ending in .tmp, which the kubelet ignores (it
// skips dot files and would run any *.yaml it finds).
func (s *staticPod) install(data []byte, perm os.FileMode) error {
	manifestsDir := filepath.Dir(s.manifestPath)
	pattern := "." + filepath.Base(s.manifestPath) + ".*.tmp"
	var errs []error
	for _, dir := range []string{s.parkDir, filepath.Dir(manifestsDir), manifestsDir} {
		if dir == s.parkDir {
			if err := os.MkdirAll(dir, 0o700); err != nil {
				errs = append(errs, err)
				continue
			}
		}
		committed, err := fsutil.WriteFileAtomicVia(s.manifestPath, dir, pattern, data, perm)
		if committed {
			return err
		}
		errs = append(errs, fmt.Errorf("via %s: %w", dir, err))
	}
	return fmt.Errorf("write manifest %s: %w", s.manifestPath, errors.Join(errs...))
}

// Retire sets the parked manifest aside for good, as movedDir/<name>.<suffix>
// (a member moved to another node): the kubelet never runs it again and the
// agent no longer finds a member here. Only a stopped member is retired.
func (s *staticPod) Retire(movedDir, suffix string) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	live, parked, err := s.where()
	switch {
	case err != nil:
		return "", err
	case live:
		return "", fmt.Errorf("the manifest %s is live: only a stopped (parked) member is retired", s.manifestPath)
	case !parked:
		return "", s.errNoManifest()
	}
	if err := os.MkdirAll(movedDir, 0o700); err != nil {
		return "", err
	}
	dst := filepath.Join(movedDir, filepath.Base(s.parkedPath)+"."+suffix)
	if err := moveFile(s.parkedPath, dst); err != nil {
		return "", fmt.Errorf("set the parked manifest aside in %s: %w", movedDir, err)
	}
	s.log.Info("member moved away: its manifest is set aside for good", zap.String("to", dst))
	return dst, nil
}
