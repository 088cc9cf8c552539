package lab

import (
	"context"
	"crypto/tls"
	"fmt"
	"net/http"
	"path/filepath"
	"strconv"
	"time"

	"go.uber.org/zap"
)

// startControlPlane starts the real kube-controller-manager and
// kube-scheduler of a management lab, each with its own identity (RBAC as
// kubeadm sets it up: the bootstrap roles of system:kube-controller-manager
// and system:kube-scheduler, controllers under their own service accounts),
// and waits until both answer /healthz.
func (l *Lab) startControlPlane(ctx context.Context, kubeconfigs map[string]string, kcmDst, schedDst **Process) error {
	a := l.Spec.APIServer
	ports, err := freePorts("127.0.0.1", 2)
	if err != nil {
		return err
	}
	pki := filepath.Join(a.Dir, "pki")
	kcmKC, schedKC := kubeconfigs["system:kube-controller-manager"], kubeconfigs["system:kube-scheduler"]
	kcm := []string{filepath.Join(l.Spec.BinDir, "kube-controller-manager"),
		"--kubeconfig=" + kcmKC, "--authentication-kubeconfig=" + kcmKC, "--authorization-kubeconfig=" + kcmKC,
		"--bind-address=127.0.0.1", "--secure-port=" + strconv.Itoa(ports[0]),
		"--cert-dir=" + filepath.Join(a.Dir, "kcm-certs"),
		"--leader-elect=false", "--use-service-account-credentials=true",
		"--service-account-private-key-file=" + filepath.Join(pki, "sa.key"), "--root-ca-file=" + filepath.Join(pki, "ca.crt"),
		"--controllers=*,-node-ipam-controller",
		"--node-monitor-period=2s", "--node-monitor-grace-period=" + nodeMonitorGrace.String(),
		"--v=1",
	}
	sched := []string{filepath.Join(l.Spec.BinDir, "kube-scheduler"),
		"--kubeconfig=" + schedKC, "--authentication-kubeconfig=" + schedKC, "--authorization-kubeconfig=" + schedKC,
		"--bind-address=127.0.0.1", "--secure-port=" + strconv.Itoa(ports[1]),
		"--cert-dir=" + filepath.Join(a.Dir, "scheduler-certs"),
		"--leader-elect=false", "--v=1",
	}
	for _, p := range []struct {
		argv []string
		log  string
		port int
		dst  **Process
	}{
		{kcm, filepath.Join(a.Dir, "kube-controller-manager.log"), ports[0], kcmDst},
		{sched, filepath.Join(a.Dir, "kube-scheduler.log"), ports[1], schedDst},
	} {
		proc, err := startDetached(p.argv, p.log)
		if err != nil {
			return err
		}
		*p.dst = &Process{PID: proc.PID, LogFile: p.log, Args: p.argv}
		if err := l.Spec.save(); err != nil {
			return err
		}
		if err := waitHealthz(ctx, proc, p.port, p.log, 90*time.Second); err != nil {
			return err
		}
		l.log.Info("started", zap.String("binary", filepath.Base(p.argv[0])), zap.Int("pid", proc.PID))
	}
	return nil
}

// waitHealthz polls https://127.0.0.1:port/healthz (self-signed serving
// cert, anonymous: /healthz is always allowed) until it answers 200.
func waitHealthz(ctx context.Context, proc *process, port int, logFile string, timeout time.Duration) error {
	c := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} // #nosec G402: a lab process's self-signed cert on loopback
	err := pollHTTPOK(ctx, c, fmt.Sprintf("https://127.0.0.1:%d/healthz", port), timeout, func() error {
		if exited(proc) {
			return fmt.Errorf("pid %d exited:\n%s", proc.PID, tail(logFile, 15))
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("%w; see %s", err, logFile)
	}
	return nil
}

// startNodeAuthorizerAPIServer starts the lab's kube-apiserver as a cluster
// with kubelets runs it (the Node authorizer, NodeRestriction), with token
// identities for the controller-manager, the scheduler and each of nodes,
// and waits until it is ready.
func (l *Lab) startNodeAuthorizerAPIServer(ctx context.Context, etcdTLS *EtcdTLS, start time.Time, nodes ...string) (*APIServer, error) {
	users := []tokenUser{{Name: "system:kube-controller-manager"}, {Name: "system:kube-scheduler"}}
	for _, n := range nodes {
		users = append(users, tokenUser{Name: "system:node:" + n, Groups: []string{"system:nodes"}})
	}
	a, proc, err := startAPIServerWith(l.Spec.BinDir, filepath.Join(l.Spec.Dir, "apiserver"), l.Spec.ClientURLs(), etcdTLS, apiExtras{
		users: users, args: []string{"--authorization-mode=Node,RBAC", "--enable-admission-plugins=NodeRestriction"}})
	if err != nil {
		return nil, err
	}
	l.Spec.APIServer = a
	if err := l.Spec.save(); err != nil {
		return nil, err
	}
	if err := waitAPIReady(ctx, a, proc, 120*time.Second); err != nil {
		return nil, err
	}
	l.log.Info("kube-apiserver ready", zap.String("url", a.URL), zap.Duration("took", time.Since(start)))
	return a, nil
}
