package chaos

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"time"

	"go.uber.org/zap"
)

// play runs one episode: its fault, its extra at the drawn moment, and the
// undo of whatever it holds down. An error is a fault that could not be
// made (the lab refused); it is reported, not an invariant broken.
func (r *runner) play(ctx context.Context, e Episode) (target string, err error) {
	target, err = r.targetOf(ctx, e)
	if err != nil {
		return "", err
	}
	r.log.Info("chaos: episode", zap.String("episode", e.String()), zap.String("node", target))
	extraDone := make(chan error, 1)
	if x := e.Extra; x != nil {
		go func() { extraDone <- r.playExtra(ctx, *x, e.N) }()
	} else {
		extraDone <- nil
	}
	err = r.fault(ctx, e, target)
	if xerr := <-extraDone; err == nil {
		err = xerr
	}
	return target, err
}

// targetOf picks the node the episode hits: the slot's, or for a leader or
// follower fault the member with that role now.
func (r *runner) targetOf(ctx context.Context, e Episode) (string, error) {
	node := r.slotNode(e.Slot)
	switch e.Kind {
	case PauseLeader, PartitionLeader, PauseFollower, PauseHung, PartitionFollower:
		leader, err := r.leaderNode(ctx)
		if err != nil {
			return "", err
		}
		if e.Kind == PauseLeader || e.Kind == PartitionLeader {
			return leader, nil
		}
		if node == leader {
			node = r.slotNode((e.Slot + 1) % len(r.slots))
		}
	}
	return node, nil
}

func (r *runner) fault(ctx context.Context, e Episode, node string) error {
	err := r.makeFault(ctx, e, node)
	if err == nil {
		r.count(e.Kind)
	}
	return err
}

func (r *runner) makeFault(ctx context.Context, e Episode, node string) error {
	switch e.Kind {
	case WipeRunning:
		return r.wipe(node, string(e.Kind))
	case WipeStopped:
		return r.stopped(node, func() error { return r.wipe(node, string(e.Kind)) })
	case KillEtcd:
		return r.withLab(func() error { _, err := r.l.KillMember(node); return err })
	case PauseLeader, PauseFollower, PauseHung:
		return r.held(ctx, e.Hold, func() error { return r.withLab(func() error { return r.l.Pause(node) }) },
			func() error { return r.withLab(func() error { return r.l.Resume(node) }) })
	case CorruptDB:
		return r.stopped(node, func() error { return r.withLab(func() error { return r.l.CorruptDB(node) }) })
	case CorruptWAL:
		return r.stopped(node, func() error { return r.withLab(func() error { return r.l.CorruptWAL(node) }) })
	case TornWAL:
		start := func() error { return r.withLab(func() error { return r.l.StartMember(node) }) }
		if err := r.withLab(func() error { _, err := r.l.CrashMember(node); return err }); err != nil {
			return errors.Join(err, start())
		}
		return errors.Join(r.tear(node), start())
	case LoseNode:
		return r.loseAndMove(ctx, e.Slot, node)
	case PartitionLeader, PartitionFollower:
		return r.held(ctx, e.Hold, func() error { return r.withLab(func() error { return r.l.Partition(node) }) },
			func() error { return r.withLab(func() error { return r.l.HealPartition(node) }) })
	case DiskFull:
		return r.held(ctx, e.Hold, func() error { return r.withLab(func() error { return r.l.FillDisk(node) }) },
			func() error { return r.withLab(func() error { return r.l.FreeDisk(node) }) })
	case MajorityStop, MajorityPause, MajorityStopWipe:
		return r.majority(ctx, e, node, r.slotNode(e.Second))
	}
	return fmt.Errorf("episode %d: no verb for %s", e.N, e.Kind)
}

// wipe removes the node's data dir, telling the ledger first that this
// removal is the fault's.
func (r *runner) wipe(node, why string) error {
	return r.withLab(func() error {
		n, err := r.l.Spec.Node(node)
		if err != nil {
			return err
		}
		r.ledger.destroy(n.DataDir, why)
		return r.l.WipeDataDir(node)
	})
}

// tear leaves a torn record at the end of a crashed member's WAL: what a
// crash in the middle of an append leaves. Not lab.TearWALTail: a record
// already written may be one the member acknowledged, which no real torn
// write can lose (raft then panics, "tocommit out of range", and the member
// must be rejoined: found by the soak, seed 505).
func (r *runner) tear(node string) error {
	return r.withLab(func() error {
		_, err := r.l.AppendTornRecord(node)
		return err
	})
}

// stopped runs f with the node's member stopped, then starts it again.
func (r *runner) stopped(node string, f func() error) error {
	start := func() error { return r.withLab(func() error { return r.l.StartMember(node) }) }
	if err := r.withLab(func() error { return r.l.StopMember(node) }); err != nil {
		return errors.Join(err, start()) // the manifest may be moved out already
	}
	return errors.Join(f(), start())
}

// held makes a fault, keeps it for d (or until ctx ends), and undoes it;
// the undo runs even when the run is being cancelled.
func (r *runner) held(ctx context.Context, d time.Duration, do, undo func() error) error {
	if err := do(); err != nil {
		return errors.Join(err, undo()) // half made: undo what was (every undo tolerates a part not made)
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
	return undo()
}

// loseAndMove loses the slot's node with its disk and moves its member to a
// new node (UC1 for static pods: the agent there rejoins it).
func (r *runner) loseAndMove(ctx context.Context, slot int, node string) error {
	return r.withLab(func() error {
		n, err := r.l.Spec.Node(node)
		if err != nil {
			return err
		}
		r.ledger.destroyNode(*n, string(LoseNode))
		if err := r.l.LoseNode(node, true); err != nil {
			return err
		}
		nn, err := r.l.AddNode(ctx)
		if err != nil {
			return err
		}
		if err := r.l.MoveMember(node, nn.Name); err != nil {
			return err
		}
		r.mu.Lock()
		r.slots[slot] = nn.Name
		r.mu.Unlock()
		r.publishNodes()
		return nil
	})
}

// majority holds two members down at once; its window is where no
// membership or data dir may change.
func (r *runner) majority(ctx context.Context, e Episode, a, b string) error {
	w := Window{From: time.Now(), Episode: e.N}
	defer func() {
		w.To = time.Now()
		r.mu.Lock()
		r.majorityWindows = append(r.majorityWindows, w)
		r.mu.Unlock()
	}()
	switch e.Kind {
	case MajorityPause:
		return r.held(ctx, e.Hold, func() error {
			if err := r.withLab(func() error { return r.l.Pause(a) }); err != nil {
				return err
			}
			return r.withLab(func() error { return r.l.Pause(b) })
		}, func() error {
			return errors.Join(r.withLab(func() error { return r.l.Resume(b) }), r.withLab(func() error { return r.l.Resume(a) }))
		})
	default: // stop both; with MajorityStopWipe a is wiped while down and comes back last
		return r.held(ctx, e.Hold, func() error {
			if err := r.withLab(func() error { return r.l.StopMember(a) }); err != nil {
				return err
			}
			if err := r.withLab(func() error { return r.l.StopMember(b) }); err != nil {
				return err
			}
			if e.Kind == MajorityStopWipe {
				return r.wipe(a, string(e.Kind))
			}
			return nil
		}, func() error {
			return errors.Join(r.withLab(func() error { return r.l.StartMember(b) }), r.withLab(func() error { return r.l.StartMember(a) }))
		})
	}
}

// playExtra makes the episode's control-plane fault at its moment.
func (r *runner) playExtra(ctx context.Context, x Extra, episode int) error {
	t := time.NewTimer(x.After)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return nil
	case <-t.C:
	}
	r.log.Info("chaos: extra", zap.Int("episode", episode), zap.String("kind", string(x.Kind)))
	err := r.makeExtra(ctx, x, episode)
	if err == nil {
		r.count(x.Kind)
	}
	return err
}

func (r *runner) makeExtra(ctx context.Context, x Extra, episode int) error {
	switch x.Kind {
	case APIStopShort, APIStopLong:
		return r.held(ctx, x.Hold, func() error { return r.withLab(r.l.StopAPIServer) },
			func() error {
				sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 3*time.Minute)
				defer cancel()
				return r.withLab(func() error { return r.l.StartAPIServer(sctx) })
			})
	case AgentKill, AgentTerm:
		sig := syscall.SIGKILL
		if x.Kind == AgentTerm {
			sig = syscall.SIGTERM
		}
		node := r.slotNode(x.Slot)
		// An error: between restarts, or its node was just lost.
		return r.withLab(func() error { return r.l.SignalAgent(node, sig) })
	}
	return fmt.Errorf("episode %d: no verb for extra %s", episode, x.Kind)
}
