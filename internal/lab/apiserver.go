package lab

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// apiServerArgs are the kube-apiserver flags of the lab: storage on every
// etcd member (so the API depends on the cluster being healed, as on a real
// control plane), static-token auth, RBAC, loopback only.
func apiServerArgs(binDir, dir string, port int, pki apiserverPKI, etcdServers []string, etcdTLS *EtcdTLS) []string {
	args := []string{
		filepath.Join(binDir, "kube-apiserver"),
		"--etcd-servers=" + strings.Join(etcdServers, ","),
		"--bind-address=127.0.0.1",
		"--advertise-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(port),
		"--cert-dir=" + filepath.Join(dir, "certs"),
		"--tls-cert-file=" + pki.CertFile,
		"--tls-private-key-file=" + pki.KeyFile,
		"--client-ca-file=" + pki.CAFile,
		"--token-auth-file=" + filepath.Join(dir, "tokens.csv"),
		"--authorization-mode=RBAC",
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file=" + pki.SAPubFile,
		"--service-account-signing-key-file=" + pki.SAKeyFile,
		"--service-cluster-ip-range=10.96.0.0/24",
		// No endpoints for the "kubernetes" Service: nothing reaches the API
		// through a Service in the lab, and 127.0.0.1 is not a valid endpoint.
		"--endpoint-reconciler-type=none",
		"--profiling=false",
		"--enable-priority-and-fairness=false",
		"--v=1",
	}
	if t := etcdTLS; t != nil {
		args = append(args, "--etcd-cafile="+t.CAFile, "--etcd-certfile="+t.ClientCert, "--etcd-keyfile="+t.ClientKey)
	}
	return args
}

// startAPIServer writes the PKI, token file and kubeconfig under dir and
// starts kube-apiserver; it does not wait for readiness (waitAPIReady does).
func startAPIServer(binDir, dir string, etcdServers []string, etcdTLS *EtcdTLS) (*APIServer, *process, error) {
	return startAPIServerWith(binDir, dir, etcdServers, etcdTLS, apiExtras{})
}

// tokenUser is an identity of the token file (kubeconfig dir/kubeconfigs/).
type tokenUser struct {
	Name   string
	Groups []string
}

// apiExtras are a management lab's additions: the control plane's and the
// kubelets' identities, and flags (a later flag wins).
type apiExtras struct {
	users []tokenUser
	args  []string
}

func startAPIServerWith(binDir, dir string, etcdServers []string, etcdTLS *EtcdTLS, x apiExtras) (*APIServer, *process, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, nil, err
	}
	pki, err := writePKI(filepath.Join(dir, "pki"))
	if err != nil {
		return nil, nil, fmt.Errorf("lab PKI: %w", err)
	}
	tok := make([]byte, 16)
	if _, err := rand.Read(tok); err != nil {
		return nil, nil, err
	}
	token := hex.EncodeToString(tok)
	ports, err := freePorts("127.0.0.1", 1)
	if err != nil {
		return nil, nil, err
	}
	url := fmt.Sprintf("https://127.0.0.1:%d", ports[0])
	tokens := token + `,lab-admin,lab-admin,"system:masters"` + "\n"
	kubeconfigs := map[string]string{}
	for _, u := range x.users {
		if _, err := rand.Read(tok); err != nil {
			return nil, nil, err
		}
		t := hex.EncodeToString(tok)
		line := fmt.Sprintf("%s,%s,%s", t, u.Name, u.Name)
		if len(u.Groups) > 0 {
			line += fmt.Sprintf(",%q", strings.Join(u.Groups, ","))
		}
		tokens += line + "\n"
		kc := filepath.Join(dir, "kubeconfigs", strings.ReplaceAll(u.Name, ":", "_")+".kubeconfig")
		if err := os.MkdirAll(filepath.Dir(kc), 0o700); err != nil {
			return nil, nil, err
		}
		if err := writeKubeconfig(kc, url, t, pki.CAPEM); err != nil {
			return nil, nil, err
		}
		kubeconfigs[u.Name] = kc
	}
	if err := os.WriteFile(filepath.Join(dir, "tokens.csv"), []byte(tokens), 0o600); err != nil {
		return nil, nil, err
	}
	kubeconfig := filepath.Join(filepath.Dir(dir), "kubeconfig")
	if err := writeKubeconfig(kubeconfig, url, token, pki.CAPEM); err != nil {
		return nil, nil, err
	}
	a := &APIServer{URL: url, Kubeconfig: kubeconfig, Token: token, Dir: dir,
		LogFile: filepath.Join(dir, "kube-apiserver.log"),
		Args:    overrideFlags(apiServerArgs(binDir, dir, ports[0], pki, etcdServers, etcdTLS), x.args), kubeconfigs: kubeconfigs}
	proc, err := startDetached(a.Args, a.LogFile)
	if err != nil {
		return nil, nil, err
	}
	a.PID = proc.PID
	return a, proc, nil
}

// overrideFlags appends extra to args, dropping the args an extra flag
// replaces (list flags such as --authorization-mode would add up instead).
func overrideFlags(args, extra []string) []string {
	name := func(a string) string { n, _, _ := strings.Cut(a, "="); return n }
	out := []string{}
	for _, a := range args {
		if !slices.ContainsFunc(extra, func(e string) bool { return name(e) == name(a) }) {
			out = append(out, a)
		}
	}
	return append(out, extra...)
}

func writeKubeconfig(path, server, token string, ca []byte) error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["lab"] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: ca}
	cfg.AuthInfos["lab-admin"] = &clientcmdapi.AuthInfo{Token: token}
	cfg.Contexts["lab"] = &clientcmdapi.Context{Cluster: "lab", AuthInfo: "lab-admin"}
	cfg.CurrentContext = "lab"
	return clientcmd.WriteToFile(*cfg, path)
}

// apiReady asks the API server's /readyz once.
func apiReady(ctx context.Context, a *APIServer) error {
	ca, err := os.ReadFile(filepath.Join(a.Dir, "pki", "ca.crt"))
	if err != nil {
		return err
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	c := &http.Client{Timeout: 3 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	defer c.CloseIdleConnections()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, a.URL+"/readyz", nil)
	req.Header.Set("Authorization", "Bearer "+a.Token)
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("/readyz: %s", resp.Status)
	}
	return nil
}

// waitAPIReady polls /readyz until it answers 200 or timeout passes.
// proc is the started process, to notice it exiting early.
func waitAPIReady(ctx context.Context, a *APIServer, proc *process, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var last error
	for {
		if exited(proc) {
			return fmt.Errorf("kube-apiserver (pid %d) exited; see %s:\n%s", a.PID, a.LogFile, tail(a.LogFile, 15))
		}
		if last = apiReady(ctx, a); last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("kube-apiserver not ready after %s: %v; see %s", timeout, last, a.LogFile)
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// tail returns the last n lines of a file, for error messages.
func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
