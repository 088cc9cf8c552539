// Package chaos_test runs the randomized fault soak (package
// test/chaos/internal/chaos) against the real lab. `make test` runs one short
// smoke run; `make e2e-chaos` runs longer ones. See docs/testing.md.
package chaos_test

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/lab/labtest"
	"github.com/etcd-agent/etcd-agent/test/chaos/internal/chaos"
	"go.uber.org/zap"
)

// Settings, from the environment (defaults: the smoke run of make test).
//
//	CHAOS_SEED      first seed (default: random, printed)
//	CHAOS_RUNS      consecutive seeds to run (default 1)
//	CHAOS_DURATION  fault time per run (default 3m)
//	CHAOS_MODE      minority (default) or majority
//	CHAOS_REPORT    folder for the JSON reports and the table (default: a temp folder)
type settings struct {
	seed     uint64
	runs     int
	duration time.Duration
	mode     chaos.Mode
	report   string
}

func fromEnv(t *testing.T) settings {
	s := settings{runs: 1, duration: 3 * time.Minute, mode: chaos.Minority, report: t.TempDir()}
	var b [8]byte
	_, _ = rand.Read(b[:])
	s.seed = binary.LittleEndian.Uint64(b[:]) % 1_000_000
	var err error
	if v := os.Getenv("CHAOS_SEED"); v != "" {
		if s.seed, err = strconv.ParseUint(v, 10, 64); err != nil {
			t.Fatalf("CHAOS_SEED=%q: %v", v, err)
		}
	}
	if v := os.Getenv("CHAOS_RUNS"); v != "" {
		if s.runs, err = strconv.Atoi(v); err != nil || s.runs < 1 {
			t.Fatalf("CHAOS_RUNS=%q: want a count ≥ 1", v)
		}
	}
	if v := os.Getenv("CHAOS_DURATION"); v != "" {
		if s.duration, err = time.ParseDuration(v); err != nil || s.duration <= 0 {
			t.Fatalf("CHAOS_DURATION=%q: want a duration such as 10m", v)
		}
	}
	if v := os.Getenv("CHAOS_MODE"); v != "" {
		s.mode = chaos.Mode(v)
	}
	if v := os.Getenv("CHAOS_REPORT"); v != "" {
		s.report = v
	}
	return s
}

// TestChaos plays CHAOS_RUNS seeds in a row; each must keep every
// invariant. A failing run prints its seed, its schedule and what broke.
func TestChaos(t *testing.T) {
	s := fromEnv(t)
	root, err := labtest.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(root, "bin")
	if err := labtest.CheckBinaries(bin, "etcd", "kube-apiserver"); err != nil {
		t.Fatal(err)
	}
	// Kept when a run fails, for its logs and its lab folder.
	work, err := os.MkdirTemp("", "etcd-agent-chaos-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if !t.Failed() {
			os.RemoveAll(work)
		}
	})
	if err := labtest.CheckFreeDisk(work, 4<<30); err != nil {
		t.Fatal(err)
	}
	agent, err := labtest.BuildAgent(root, work)
	if err != nil {
		t.Fatal(err)
	}
	table := []string{chaos.TableHeader}
	for i := range s.runs {
		seed := s.seed + uint64(i)
		t.Logf("chaos run %d/%d: seed %d, %s, %s (replay: CHAOS_SEED=%d CHAOS_MODE=%s)", i+1, s.runs, seed, s.mode, s.duration, seed, s.mode)
		ctx, cancel := context.WithTimeout(context.Background(), s.duration+20*time.Minute)
		logPath := filepath.Join(work, fmt.Sprintf("chaos-%d.log", seed))
		cfg := zap.NewProductionConfig()
		cfg.OutputPaths, cfg.Sampling = []string{logPath}, nil
		log, err := cfg.Build()
		if err != nil {
			t.Fatal(err)
		}
		rep, err := chaos.Run(ctx, chaos.Options{Seed: seed, Mode: s.mode, Duration: s.duration,
			Dir: filepath.Join(work, fmt.Sprintf("lab-%d", seed)), BinDir: bin, AgentBinary: agent,
			Progress: t.Logf, Log: log})
		cancel()
		_ = log.Sync()
		if rep != nil {
			table = append(table, rep.Row())
			if path, werr := rep.Write(s.report); werr == nil {
				t.Logf("report: %s", path)
			}
		}
		if err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		t.Logf("seed %d: %d episodes, %d heals, API p99 %s, max unavailable %s, %d etcd ops checked linearizable",
			seed, len(rep.Episodes), rep.Heals, rep.APIp99.Round(time.Millisecond), rep.MaxUnavailable.Round(100*time.Millisecond), rep.Linearizable.Ops)
		if len(rep.Unavailable) > 0 {
			t.Logf("faults this machine cannot make: %s", strings.Join(rep.Unavailable, "; "))
		}
		if !rep.Passed() {
			t.Errorf("seed %d broke %d invariants:\n  %s\n%s", seed, len(rep.Violations), strings.Join(rep.Violations, "\n  "), rep.Schedule())
			t.Logf("lab folder kept: %s; the runner's and the lab's log: %s", filepath.Join(work, fmt.Sprintf("lab-%d", seed)), logPath)
			break
		}
	}
	t.Logf("chaos runs:\n%s", strings.Join(table, "\n"))
	_ = os.WriteFile(filepath.Join(s.report, "table.md"), []byte(strings.Join(table, "\n")+"\n"), 0o644)
}
