package supervisor

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"time"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// probe runs the readiness probes of the pod's containers until the pod
// stops: an httpGet or tcpSocket against the pod's IP, every periodSeconds,
// ready after successThreshold successes, unready after failureThreshold
// failures, as the kubelet does. A container without a probe is ready while
// it runs.
func (k *kubelet) probe(ctx context.Context, key string, ap *apiPod) {
	for _, c := range ap.runner.pod.Spec.Containers {
		if c.ReadinessProbe == nil {
			continue
		}
		go func() {
			p := c.ReadinessProbe
			period := time.Duration(max(p.PeriodSeconds, 1)) * time.Second
			timeout := time.Duration(max(p.TimeoutSeconds, 1)) * time.Second
			okNeed, failNeed := max(p.SuccessThreshold, 1), max(p.FailureThreshold, 1)
			var oks, fails int32
			var probedPID int
			pctx, cancel := context.WithCancel(ctx)
			defer cancel()
			go func() { <-ap.runner.done; cancel() }()
			if !sleepCtx(pctx, time.Duration(p.InitialDelaySeconds)*time.Second) {
				return
			}
			every(pctx, period, func(ctx context.Context) {
				st := ap.runner.snapshot().Containers[c.Name]
				if st.State != "running" {
					oks, fails = 0, 0
					return
				}
				if st.PID != probedPID { // a restarted process starts unready
					oks, fails, probedPID = 0, 0, st.PID
				}
				err := runProbe(ctx, p.ProbeHandler, ap.ip, c, timeout)
				if err == nil {
					oks, fails = oks+1, 0
				} else {
					oks, fails = 0, fails+1
				}
				switch {
				case !st.Ready && oks >= okNeed:
					// Only the process that was probed becomes ready.
					ap.runner.update(c.Name, func(s *ContainerState) { s.Ready = s.State == "running" && s.PID == st.PID })
				case st.Ready && fails >= failNeed:
					k.log.Info("lab kubelet: readiness probe failed", zap.String("pod", key), zap.String("container", c.Name), zap.Error(err))
					ap.runner.update(c.Name, func(s *ContainerState) { s.Ready = false })
				}
			})
		}()
	}
}

func runProbe(ctx context.Context, h corev1.ProbeHandler, podIP string, c corev1.Container, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	switch {
	case h.HTTPGet != nil:
		port, err := probePort(h.HTTPGet.Port, c)
		if err != nil {
			return err
		}
		host := podIP
		if h.HTTPGet.Host != "" {
			host = h.HTTPGet.Host
		}
		scheme := "http"
		if h.HTTPGet.Scheme == corev1.URISchemeHTTPS {
			return fmt.Errorf("https probes are not supported in the lab")
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("%s://%s%s", scheme, net.JoinHostPort(host, strconv.Itoa(port)), h.HTTPGet.Path), nil)
		if err != nil {
			return err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode < 200 || resp.StatusCode >= 400 {
			return fmt.Errorf("HTTP %d", resp.StatusCode)
		}
		return nil
	case h.TCPSocket != nil:
		port, err := probePort(h.TCPSocket.Port, c)
		if err != nil {
			return err
		}
		conn, err := (&net.Dialer{}).DialContext(ctx, "tcp", net.JoinHostPort(podIP, strconv.Itoa(port)))
		if err != nil {
			return err
		}
		return conn.Close()
	default:
		return fmt.Errorf("only httpGet and tcpSocket probes run in the lab")
	}
}

func probePort(p intstr.IntOrString, c corev1.Container) (int, error) {
	if p.Type == intstr.Int {
		return p.IntValue(), nil
	}
	for _, cp := range c.Ports {
		if cp.Name == p.StrVal {
			return int(cp.ContainerPort), nil
		}
	}
	return 0, fmt.Errorf("probe port %q is not a named port of container %s", p.StrVal, c.Name)
}
