package lab

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"go.uber.org/zap"
)

// Snapshot stores a lab can give its agents (--snapshot-store).
const (
	SnapshotStoreFile = "file" // a folder of the lab, as a shared filesystem mounted on every node
	SnapshotStoreS3   = "s3"   // a real S3-compatible server: SeaweedFS (`weed mini`, built by make tools)
)

// The lab S3 server's bucket and credentials (the agents get them as the
// AWS SDK's environment, as a Secret would give them in a cluster).
const (
	S3Bucket    = "etcd-snapshots"
	S3AccessKey = "etcd-agent-lab"
	S3SecretKey = "etcd-agent-lab-secret"
	s3Region    = "us-east-1"
)

// SnapshotStore is the lab's snapshot store.
type SnapshotStore struct {
	Kind string `json:"kind"`
	// URL is what the agents get as --snapshot-store.
	URL string `json:"url"`
	// Dir is the store's folder (file) or the S3 server's data (s3).
	Dir string `json:"dir"`
	// S3 only: the server's process and endpoint.
	PID      int    `json:"pid,omitempty"`
	Endpoint string `json:"endpoint,omitempty"`
	LogFile  string `json:"logFile,omitempty"`
}

// Env is what a process needs to reach the store (the S3 credentials).
func (s *SnapshotStore) Env() map[string]string {
	if s == nil || s.Kind != SnapshotStoreS3 {
		return nil
	}
	return map[string]string{"AWS_ACCESS_KEY_ID": S3AccessKey, "AWS_SECRET_ACCESS_KEY": S3SecretKey, "AWS_REGION": s3Region}
}

// StartS3Server runs the lab's S3 server alone under dir (tests of the
// snapshot store); Stop stops it.
func StartS3Server(ctx context.Context, binDir, dir string, log *zap.Logger) (*SnapshotStore, error) {
	if log == nil {
		log = zap.NewNop()
	}
	return startS3Server(ctx, binDir, dir, log, nil)
}

// Stop stops the S3 server (a file store has nothing to stop).
func (s *SnapshotStore) Stop() error {
	if s == nil || s.PID == 0 {
		return nil
	}
	return stopPID(s.PID, s.Dir, 15*time.Second)
}

// startSnapshotStore sets up the store of kind under dir; started (may be
// nil) is told of a server process as soon as it runs, before the wait for
// it to serve (so that a lab interrupted meanwhile still stops it).
func startSnapshotStore(ctx context.Context, binDir, dir, kind string, log *zap.Logger, started func(*SnapshotStore) error) (*SnapshotStore, error) {
	switch kind {
	case SnapshotStoreFile:
		d := filepath.Join(dir, "snapshot-store")
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
		return &SnapshotStore{Kind: kind, URL: "file://" + d, Dir: d}, nil
	case SnapshotStoreS3:
		return startS3Server(ctx, binDir, filepath.Join(dir, "s3"), log, started)
	}
	return nil, fmt.Errorf("snapshot store %q: want %s or %s", kind, SnapshotStoreFile, SnapshotStoreS3)
}

// startS3Server runs `weed mini` on loopback with free ports, one bucket and
// one identity, and waits until the bucket answers a signed request.
func startS3Server(ctx context.Context, binDir, dir string, log *zap.Logger, started func(*SnapshotStore) error) (*SnapshotStore, error) {
	bin := filepath.Join(binDir, "weed")
	if _, err := os.Stat(bin); err != nil {
		return nil, fmt.Errorf("the lab's S3 server %s: %w (run `make tools`)", bin, err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "data"), 0o755); err != nil {
		return nil, err
	}
	cfg := filepath.Join(dir, "s3-identities.json")
	ident := fmt.Sprintf(`{"identities":[{"name":"etcd-agent","credentials":[{"accessKey":%q,"secretKey":%q}],"actions":["Admin","Read","Write","List","Tagging"]}]}`,
		S3AccessKey, S3SecretKey)
	if err := os.WriteFile(cfg, []byte(ident), 0o600); err != nil {
		return nil, err
	}
	// weed mini serves a master, a volume server, a filer, the S3 gateway
	// and more, each on an HTTP and a gRPC port: all chosen free here.
	names := []string{"master.port", "master.port.grpc", "volume.port", "volume.port.grpc", "filer.port", "filer.port.grpc",
		"s3.port", "s3.port.grpc", "s3.port.iceberg", "s3.port.lance", "admin.port", "admin.port.grpc", "webdav.port", "metricsPort"}
	ports, err := freePorts("127.0.0.1", len(names))
	if err != nil {
		return nil, err
	}
	argv := []string{bin, "mini", "-dir=" + filepath.Join(dir, "data"), "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
		"-admin.ui=false", "-admin.port.legacy=0", "-webdav=false", "-master.telemetry=false",
		"-s3.config=" + cfg, "-bucket=" + S3Bucket}
	s3Port := 0
	for i, n := range names {
		argv = append(argv, "-"+n+"="+strconv.Itoa(ports[i]))
		if n == "s3.port" {
			s3Port = ports[i]
		}
	}
	logFile := filepath.Join(dir, "weed.log")
	start := time.Now()
	proc, err := startDetached(argv, logFile)
	if err != nil {
		return nil, err
	}
	s := &SnapshotStore{Kind: SnapshotStoreS3, Dir: dir, PID: proc.PID, LogFile: logFile, Endpoint: fmt.Sprintf("http://127.0.0.1:%d", s3Port)}
	q := url.Values{"endpoint": {s.Endpoint}, "region": {s3Region}, "use_path_style": {"true"}, "disable_https": {"true"}}
	s.URL = "s3://" + S3Bucket + "?" + q.Encode()
	if started != nil {
		if err := started(s); err != nil {
			_ = stopPID(proc.PID, dir, 10*time.Second)
			return nil, err
		}
	}
	if err := waitBucket(ctx, s, proc, 90*time.Second); err != nil {
		_ = stopPID(proc.PID, dir, 10*time.Second)
		return nil, err
	}
	log.Info("S3 server ready (SeaweedFS weed mini)", zap.String("endpoint", s.Endpoint), zap.String("bucket", S3Bucket),
		zap.Duration("took", time.Since(start)))
	return s, nil
}

// waitBucket polls HeadBucket with the lab's credentials: the server is up
// and has made the bucket.
func waitBucket(ctx context.Context, s *SnapshotStore, proc *process, timeout time.Duration) error {
	c := s3.New(s3.Options{Region: s3Region, BaseEndpoint: aws.String(s.Endpoint), UsePathStyle: true,
		Credentials: credentials.NewStaticCredentialsProvider(S3AccessKey, S3SecretKey, "")})
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var last error
	for {
		rctx, rcancel := context.WithTimeout(ctx, 2*time.Second)
		_, err := c.HeadBucket(rctx, &s3.HeadBucketInput{Bucket: aws.String(S3Bucket)})
		rcancel()
		if err == nil {
			return nil
		}
		last = err
		select {
		case <-proc.done:
			return fmt.Errorf("the lab's S3 server exited; see %s", s.LogFile)
		case <-ctx.Done():
			return errors.Join(fmt.Errorf("the lab's S3 server did not serve bucket %s within %s; see %s", S3Bucket, timeout, s.LogFile), last)
		case <-time.After(250 * time.Millisecond):
		}
	}
}
