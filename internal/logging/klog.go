package logging

import (
	"github.com/go-logr/zapr"
	"go.uber.org/zap"
	"k8s.io/klog/v2"
)

// BridgeKlog routes klog (what client-go logs through: leader election,
// reflectors, the event broadcaster, client-side throttling) into log,
// named "klog", at log's level (klog's V(n) lines are zap level -n, so
// dropped unless the level allows them), instead of klog's own format on
// stderr. It returns a function that undoes it (tests).
func BridgeKlog(log *zap.Logger) (restore func()) {
	klog.SetLogger(zapr.NewLogger(log.Named("klog")))
	return klog.ClearLogger
}
