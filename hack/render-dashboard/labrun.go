package main

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"
)

// labCmd runs the scenario the committed screenshot shows: a 3-node lab with
// agents under a steady write load; node2's data dir is wiped under its
// running member and its agent heals it; a dry-run manual request on node1 is
// refused (reason dry-run); node3's etcd is killed and restarted by its
// supervisor inside the grace period; node4 is added with a new member's
// manifest and node3's member moved to it (UC3). Every agent's /metrics is
// recorded once a second throughout (node4's from when it is added), then
// rendered.
func labCmd(args []string) error {
	fs := flag.NewFlagSet("lab", flag.ExitOnError)
	repo := fs.String("repo", "../..", "the etcd-agent repository (bin/ must hold etcd and kube-apiserver: make tools)")
	dir := fs.String("dir", "", "lab folder (default: a new temporary folder)")
	recPath := fs.String("recording", "lab-run.jsonl.gz", "recording to write")
	out := fs.String("out", "dashboard.png", "PNG to write")
	dash := fs.String("dashboard", "", "the Grafana dashboard JSON (default <repo>/deploy/grafana/etcd-agent-dashboard.json)")
	seedMiB := fs.Int("seed-mib", 24, "MiB of data written before the scenario (the snapshot the learner needs)")
	_ = fs.Parse(args)
	root, err := filepath.Abs(*repo)
	if err != nil {
		return err
	}
	if *dash == "" {
		*dash = filepath.Join(root, "deploy", "grafana", "etcd-agent-dashboard.json")
	}
	if *dir == "" {
		if *dir, err = os.MkdirTemp("", "render-dashboard-lab-"); err != nil {
			return err
		}
	}
	if *dir, err = filepath.Abs(*dir); err != nil {
		return err
	}
	ctx := context.Background()

	agent, labBin := filepath.Join(*dir, "etcd-agent"), filepath.Join(*dir, "etcd-agent-lab")
	step("build etcd-agent and etcd-agent-lab")
	for bin, pkg := range map[string]string{agent: "./cmd/etcd-agent", labBin: "./cmd/etcd-agent-lab"} {
		if err := run(root, "go", "build", "-o", bin, pkg); err != nil {
			return err
		}
	}
	labDir := filepath.Join(*dir, "lab")
	lab := func(verb string, more ...string) error {
		return run(root, labBin, append([]string{verb, "--dir", labDir}, more...)...)
	}
	step("lab up: 3 nodes with agents (a move needs a snapshot store: a lab folder)")
	if err := lab("up", "--nodes", "3", "--agents", "--snapshot-store", "file", "--bin-dir", filepath.Join(root, "bin"), "--agent-binary", agent); err != nil {
		_ = lab("down")
		return err
	}
	defer func() {
		step("lab down")
		_ = lab("down")
	}()
	spec, err := readLabSpec(labDir)
	if err != nil {
		return err
	}
	targets, err := labTargets(labDir)
	if err != nil {
		return err
	}
	etcdURL := spec.Nodes[0].ClientURL

	step(fmt.Sprintf("seed %d MiB into etcd", *seedMiB))
	if err := seed(ctx, etcdURL, *seedMiB); err != nil {
		return err
	}

	// Record and write in the background.
	f, err := os.Create(*recPath)
	if err != nil {
		return err
	}
	gz := gzip.NewWriter(f)
	rctx, stopRec := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var rounds int
	var recErr error
	wg.Go(func() { rounds, recErr = record(rctx, liveTargets(labDir, targets), time.Second, gz) })
	var puts atomic.Int64
	wg.Go(func() { writeLoad(rctx, etcdURL, &puts) })

	scenario := func() error {
		time.Sleep(12 * time.Second)
		step("wipe node2's data dir under its running member")
		if err := lab("wipe", "--node", "node2"); err != nil {
			return err
		}
		if err := waitState(ctx, targets["node2"], false, 30*time.Second); err != nil {
			return fmt.Errorf("node2 never left healthy: %w", err)
		}
		if err := waitState(ctx, targets["node2"], true, 3*time.Minute); err != nil {
			return fmt.Errorf("node2 not healed: %w", err)
		}
		step("node2 healed")
		time.Sleep(10 * time.Second)
		step("dry-run manual request on node1")
		if err := annotate(ctx, spec, "node1", `{"metadata":{"annotations":{"etcd-agent.io/recover-dry-run":"true","etcd-agent.io/recover":"rejoin"}}}`); err != nil {
			return err
		}
		time.Sleep(8 * time.Second)
		step("kill node3's etcd (its supervisor restarts it)")
		if err := lab("kill-member", "--node", "node3"); err != nil {
			return err
		}
		time.Sleep(15 * time.Second)
		step("add node4 with a new member's manifest, and move node3's member to it")
		if err := lab("add-node", "--member"); err != nil {
			return err
		}
		moved, err := labTargets(labDir)
		if err != nil || moved["node4"] == "" {
			return fmt.Errorf("node4's agent is not in the lab (%v)", err)
		}
		if err := annotate(ctx, spec, "node3", `{"metadata":{"annotations":{"etcd-agent.io/move-to":"node4"}}}`); err != nil {
			return err
		}
		if err := waitState(ctx, moved["node4"], true, 5*time.Minute); err != nil {
			return fmt.Errorf("node4's member never served: %w", err)
		}
		if err := waitAnnotationGone(ctx, spec, "node3", "etcd-agent.io/move-to", 5*time.Minute); err != nil {
			return err
		}
		step("node3's member moved to node4")
		time.Sleep(15 * time.Second)
		return nil
	}
	serr := scenario()
	stopRec()
	wg.Wait()
	if err := errors.Join(recErr, gz.Close(), f.Close()); err != nil {
		return err
	}
	step(fmt.Sprintf("recorded %d rounds, %d writes acknowledged during the run", rounds, puts.Load()))
	if serr != nil {
		return serr
	}
	return render(*recPath, *dash, *out)
}

func step(s string) { fmt.Printf("%s  %s\n", time.Now().UTC().Format("15:04:05"), s) }

func run(dir, name string, args ...string) error {
	cmd := exec.Command(name, args...)
	cmd.Dir, cmd.Stdout, cmd.Stderr = dir, os.Stdout, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s %v: %w", name, args, err)
	}
	return nil
}

// put writes one key through etcd's JSON gateway.
func put(ctx context.Context, etcdURL, key string, value []byte) error {
	body := fmt.Sprintf(`{"key":%q,"value":%q}`, base64.StdEncoding.EncodeToString([]byte(key)), base64.StdEncoding.EncodeToString(value))
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, etcdURL+"/v3/kv/put", bytes.NewBufferString(body))
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("put %s: %s", key, resp.Status)
	}
	return nil
}

func seed(ctx context.Context, etcdURL string, mib int) error {
	value := bytes.Repeat([]byte("x"), 64<<10)
	n := mib * 16
	var wg sync.WaitGroup
	errs := make(chan error, n)
	sem := make(chan struct{}, 4)
	for i := range n {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			if err := put(ctx, etcdURL, fmt.Sprintf("seed/%05d", i), value); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// writeLoad writes ~100 small keys a second until ctx ends.
func writeLoad(ctx context.Context, etcdURL string, acked *atomic.Int64) {
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	value := bytes.Repeat([]byte("w"), 1024)
	for i := 0; ; i++ {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if put(ctx, etcdURL, fmt.Sprintf("load/%07d", i), value) == nil {
			acked.Add(1)
		}
	}
}

// waitState polls an agent's /metrics until its member is (or is not) healthy.
func waitState(ctx context.Context, url string, healthy bool, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	last := ""
	for time.Now().Before(deadline) {
		if samples, err := scrapeOnce(ctx, url); err == nil {
			s := &Scrape{Up: true, Samples: samples}
			st, _ := s.oneHot("etcd_agent_member_state", "state")
			last = st
			if (st == "healthy") == healthy && st != "" {
				return nil
			}
		}
		time.Sleep(250 * time.Millisecond)
	}
	return fmt.Errorf("after %s the member state is %q", timeout, last)
}

// annotate merge-patches a Node through the lab's API server (admin token).
func annotate(ctx context.Context, spec labSpec, node, patch string) error {
	resp, err := nodeRequest(ctx, spec, http.MethodPatch, node, patch)
	if err != nil {
		return err
	}
	resp.Body.Close()
	return nil
}

// waitAnnotationGone polls a Node until the annotation is gone (an agent
// took the request it carried and answered it).
func waitAnnotationGone(ctx context.Context, spec labSpec, node, key string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		resp, err := nodeRequest(ctx, spec, http.MethodGet, node, "")
		if err == nil {
			var n struct {
				Metadata struct {
					Annotations map[string]string `json:"annotations"`
				} `json:"metadata"`
			}
			err = json.NewDecoder(resp.Body).Decode(&n)
			resp.Body.Close()
			if _, there := n.Metadata.Annotations[key]; err == nil && !there {
				return nil
			}
		}
		time.Sleep(500 * time.Millisecond)
	}
	return fmt.Errorf("after %s node %s still has %s", timeout, node, key)
}

// nodeRequest sends one request for a Node to the lab's API server (admin
// token); a status other than 200 is an error.
func nodeRequest(ctx context.Context, spec labSpec, method, node, patch string) (*http.Response, error) {
	if spec.APIServer == nil {
		return nil, errors.New("the lab has no API server")
	}
	ca, err := os.ReadFile(filepath.Join(spec.APIServer.Dir, "pki", "ca.crt"))
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	req, err := http.NewRequestWithContext(ctx, method, spec.APIServer.URL+"/api/v1/nodes/"+node, bytes.NewBufferString(patch))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+spec.APIServer.Token)
	if patch != "" {
		req.Header.Set("Content-Type", "application/merge-patch+json")
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		return nil, fmt.Errorf("%s node %s: %s", method, node, resp.Status)
	}
	return resp, nil
}
