package realnode

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"
)

// EthName is the node's end of the veth the lab creates.
const EthName = "eth0"

// layNetwork brings the node's network up: lo with its extra /32s, and
// eth0 (moved in by the lab) with the node IP. The node has no default
// route: nothing it runs can reach beyond the lab.
func layNetwork(ctx context.Context, c Config, log *zap.Logger) error {
	if err := ip("link", "set", "lo", "up"); err != nil {
		return err
	}
	for _, a := range c.LoopbackIPs {
		if err := ip("addr", "add", a+"/32", "dev", "lo"); err != nil {
			return err
		}
	}
	// The lab moves eth0 in right after it starts this process.
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := net.InterfaceByName(EthName); err == nil {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s did not appear in the node's network namespace within 30s", EthName)
		}
		log.Debug("waiting for the lab to move the veth in", zap.String("link", EthName))
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	if err := ip("addr", "add", fmt.Sprintf("%s/%d", c.NodeIP, c.Prefix), "dev", EthName); err != nil {
		return err
	}
	return ip("link", "set", EthName, "up")
}

func ip(args ...string) error {
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// forwarder listens inside the node and dials out in the lab's network
// namespace (labNS), so that the node reaches the other members and the API
// server on 127.0.0.0/8 at the addresses they advertise.
type forwarder struct {
	labNS  *os.File
	nodeNS *os.File
	log    *zap.Logger
	wg     sync.WaitGroup
}

func newForwarder(labNS *os.File, log *zap.Logger) (*forwarder, error) {
	self, err := os.Open("/proc/thread-self/ns/net")
	if err != nil {
		return nil, err
	}
	return &forwarder{labNS: labNS, nodeNS: self, log: log}, nil
}

// serve forwards every entry ("addr" or "listen=target") until ctx ends.
func (f *forwarder) serve(ctx context.Context, entries []string) error {
	for _, e := range entries {
		listen, target, ok := strings.Cut(e, "=")
		if !ok {
			target = listen
		}
		ln, err := net.Listen("tcp", listen)
		if err != nil {
			return fmt.Errorf("forward %s: %w", e, err)
		}
		f.log.Info("forwarding into the node", zap.String("listen", listen), zap.String("target", target))
		f.wg.Add(1)
		go func() {
			defer f.wg.Done()
			<-ctx.Done()
			_ = ln.Close()
		}()
		f.wg.Add(1)
		go func() {
			defer f.wg.Done()
			f.accept(ctx, ln, target)
		}()
	}
	return nil
}

func (f *forwarder) accept(ctx context.Context, ln net.Listener, target string) {
	for {
		in, err := ln.Accept()
		if err != nil {
			return
		}
		go func() {
			defer in.Close()
			out, err := f.dialLab(ctx, target)
			if err != nil {
				f.log.Debug("forward: dial in the lab's namespace failed", zap.String("target", target), zap.Error(err))
				return
			}
			defer out.Close()
			done := make(chan struct{}, 2)
			go func() { _, _ = io.Copy(out, in); closeWrite(out); done <- struct{}{} }()
			go func() { _, _ = io.Copy(in, out); closeWrite(in); done <- struct{}{} }()
			<-done
			<-done
		}()
	}
}

func closeWrite(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.CloseWrite()
	}
}

// dialLab creates the socket on a thread switched into the lab's network
// namespace: a socket stays in the namespace it was made in.
func (f *forwarder) dialLab(ctx context.Context, target string) (net.Conn, error) {
	type result struct {
		c   net.Conn
		err error
	}
	ch := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		if err := unix.Setns(int(f.labNS.Fd()), unix.CLONE_NEWNET); err != nil {
			// The thread may be in either namespace: let it die with the
			// goroutine instead of serving others (no UnlockOSThread).
			ch <- result{err: err}
			return
		}
		d := net.Dialer{Timeout: 5 * time.Second}
		c, err := d.DialContext(ctx, "tcp", target)
		if berr := unix.Setns(int(f.nodeNS.Fd()), unix.CLONE_NEWNET); berr != nil {
			ch <- result{c: c, err: errors.Join(err, berr)}
			return
		}
		runtime.UnlockOSThread()
		ch <- result{c: c, err: err}
	}()
	r := <-ch
	return r.c, r.err
}
