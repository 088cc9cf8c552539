package logging

import (
	"errors"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
	"k8s.io/klog/v2"
)

// client-go logs through klog (leader election, reflectors, the event
// broadcaster, throttling): those lines must reach the agent's logger, in
// its format, at its level, not stderr in klog's own format.
func TestKlogGoesThroughZap(t *testing.T) {
	core, logs := observer.New(zap.InfoLevel)
	restore := BridgeKlog(zap.New(core))
	t.Cleanup(restore)

	klog.InfoS("reflector started", "resource", "nodes")
	klog.ErrorS(errors.New("connection refused"), "lease update failed", "lease", "etcd-agent-c1")
	klog.V(4).InfoS("a chatty client-go line") // below the agent's level: dropped
	klog.Flush()

	if n := logs.FilterMessage("reflector started").FilterField(zap.String("resource", "nodes")).Len(); n != 1 {
		t.Fatalf("klog.InfoS reached zap %d times, want 1: %v", n, logs.All())
	}
	errs := logs.FilterMessage("lease update failed").All()
	if len(errs) != 1 || errs[0].Level != zapcore.ErrorLevel {
		t.Fatalf("klog.ErrorS: %v, want one error-level entry", errs)
	}
	if n := logs.FilterMessage("a chatty client-go line").Len(); n != 0 {
		t.Fatal("klog V(4) logged at the info level")
	}
	if errs[0].LoggerName != "klog" {
		t.Fatalf("logger name %q, want klog (so client-go's lines are told apart)", errs[0].LoggerName)
	}
}
