package main

import (
	"bufio"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"sort"
	"strings"
	"sync"
	"time"
)

// Round is one scrape of every agent, stamped with one time (so that
// cluster-wide panels can combine the agents' views as PromQL would at one
// evaluation time).
type Round struct {
	T     time.Time          `json:"t"`
	Nodes map[string]*Scrape `json:"nodes"`
}

// Scrape is one agent's /metrics at a round; Up is false when it failed
// (Prometheus' up == 0).
type Scrape struct {
	Up      bool     `json:"up"`
	Samples []Sample `json:"s,omitempty"`
}

// Recording is a sequence of rounds, in time order.
type Recording []Round

// keep drops the series the dashboard does not use, to keep recordings small:
// the observation-duration histogram (parseText keeps no buckets).
func keep(s Sample) bool {
	return !strings.HasPrefix(s.Name, "etcd_agent_observation_duration")
}

// scrapeRound scrapes every target (node name -> /metrics URL) concurrently.
func scrapeRound(ctx context.Context, targets map[string]string, at time.Time) Round {
	r := Round{T: at.UTC(), Nodes: map[string]*Scrape{}}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for node, url := range targets {
		wg.Go(func() {
			sc := &Scrape{}
			if samples, err := scrapeOnce(ctx, url); err == nil {
				sc.Up = true
				for _, s := range samples {
					if keep(s) {
						sc.Samples = append(sc.Samples, s)
					}
				}
			}
			mu.Lock()
			r.Nodes[node] = sc
			mu.Unlock()
		})
	}
	wg.Wait()
	return r
}

func scrapeOnce(ctx context.Context, url string) ([]Sample, error) {
	ctx, cancel := context.WithTimeout(ctx, 900*time.Millisecond)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: %s", url, resp.Status)
	}
	return parseText(resp.Body, "etcd_agent_")
}

// record scrapes targets every interval until ctx ends, writing each round
// to w as one JSON line.
func record(ctx context.Context, targets func() map[string]string, interval time.Duration, w io.Writer) (int, error) {
	enc := json.NewEncoder(w)
	tick := time.NewTicker(interval)
	defer tick.Stop()
	n := 0
	for {
		r := scrapeRound(ctx, targets(), time.Now())
		if ctx.Err() != nil {
			return n, nil
		}
		if err := enc.Encode(r); err != nil {
			return n, err
		}
		n++
		select {
		case <-ctx.Done():
			return n, nil
		case <-tick.C:
		}
	}
}

// readRecording reads a JSON-lines recording, gzipped when path ends in .gz.
func readRecording(path string) (Recording, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var r io.Reader = f
	if strings.HasSuffix(path, ".gz") {
		gz, err := gzip.NewReader(f)
		if err != nil {
			return nil, err
		}
		defer gz.Close()
		r = gz
	}
	var rec Recording
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 4<<20), 4<<20)
	for sc.Scan() {
		if len(strings.TrimSpace(sc.Text())) == 0 {
			continue
		}
		var round Round
		if err := json.Unmarshal(sc.Bytes(), &round); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		rec = append(rec, round)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	sort.SliceStable(rec, func(i, j int) bool { return rec[i].T.Before(rec[j].T) })
	if len(rec) < 2 {
		return nil, fmt.Errorf("%s: %d rounds; need at least 2", path, len(rec))
	}
	return rec, nil
}

// nodes lists the node names seen in the recording, sorted.
func (rec Recording) nodes() []string {
	seen := map[string]bool{}
	for _, r := range rec {
		for n := range r.Nodes {
			seen[n] = true
		}
	}
	var out []string
	for n := range seen {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// oneHot returns the value of label of the series of name that is 1.
func (s *Scrape) oneHot(name, label string) (string, bool) {
	if s == nil || !s.Up {
		return "", false
	}
	for _, smp := range s.Samples {
		if smp.Name == name && smp.Value == 1 {
			return smp.Labels[label], true
		}
	}
	return "", false
}
