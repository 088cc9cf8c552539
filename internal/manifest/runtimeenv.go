package manifest

import (
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
)

// PodFields are the downward-API fields of a running pod that a container's
// env may refer to with valueFrom.fieldRef.
type PodFields struct {
	Name, Namespace, UID, NodeName, ServiceAccount, PodIP, HostIP string
}

// field answers a fieldRef path the way the kubelet does for the fields a
// pod's own identity needs; anything else is an error, never a guess.
func (f PodFields) field(path string) (string, error) {
	v, ok := map[string]string{
		"metadata.name":           f.Name,
		"metadata.namespace":      f.Namespace,
		"metadata.uid":            f.UID,
		"spec.nodeName":           f.NodeName,
		"spec.serviceAccountName": f.ServiceAccount,
		"status.podIP":            f.PodIP,
		"status.podIPs":           f.PodIP,
		"status.hostIP":           f.HostIP,
		"status.hostIPs":          f.HostIP,
	}[path]
	if !ok {
		return "", fmt.Errorf("fieldRef %q is not supported", path)
	}
	if v == "" {
		return "", fmt.Errorf("fieldRef %q has no value yet", path)
	}
	return v, nil
}

// ContainerEnv is a container's environment as the kubelet sets it when it
// starts the container: plain values and fieldRefs, in order, each able to
// refer to those defined before it.
type ContainerEnv struct {
	names []string // in definition order, each once
	env   envVars
}

// RuntimeEnv resolves c's env for a pod with fields. Secret, ConfigMap and
// resource references are refused: the lab runs no such pods, and an agent
// must not guess an identity from them.
func RuntimeEnv(c corev1.Container, fields PodFields) (ContainerEnv, error) {
	if len(c.EnvFrom) > 0 {
		return ContainerEnv{}, fmt.Errorf("envFrom (ConfigMaps, Secrets) is not supported")
	}
	e, err := resolveEnvFrom(c.Env, func(v corev1.EnvVar) (string, error) {
		if v.ValueFrom.FieldRef == nil {
			return "", fmt.Errorf("env %s: only valueFrom.fieldRef is supported", v.Name)
		}
		val, err := fields.field(v.ValueFrom.FieldRef.FieldPath)
		if err != nil {
			return "", fmt.Errorf("env %s: %w", v.Name, err)
		}
		return val, nil
	})
	if err != nil {
		return ContainerEnv{}, err
	}
	var names []string
	for _, v := range c.Env {
		if !slices.Contains(names, v.Name) {
			names = append(names, v.Name)
		}
	}
	return ContainerEnv{names: names, env: e}, nil
}

// Expand applies $(VAR) expansion to s with this environment.
func (e ContainerEnv) Expand(s string) string {
	v, _ := e.env.expand(s)
	return v
}

// Argv is the container's command and args after $(VAR) expansion.
func (e ContainerEnv) Argv(c corev1.Container) []string {
	argv := make([]string, 0, len(c.Command)+len(c.Args))
	for _, a := range append(append([]string{}, c.Command...), c.Args...) {
		argv = append(argv, e.Expand(a))
	}
	return argv
}

// Environ lists NAME=value pairs in definition order, for exec.
func (e ContainerEnv) Environ() []string {
	out := make([]string, 0, len(e.names))
	for _, n := range e.names {
		out = append(out, n+"="+e.env.values[n])
	}
	return out
}
