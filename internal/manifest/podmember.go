package manifest

import (
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// MemberOfPod is the member an API pod's etcd container describes, exactly
// as the kubelet runs it: env resolved with the pod's fields (the downward
// API: $(POD_NAME), $(POD_IP)), $(VAR)s expanded. Paths are as seen inside
// the container (HostMounts is empty: a pod's volumes are PVCs as often as
// hostPaths, which only the caller can resolve); the container is returned
// for its volume mounts, argv for the start gate's own flags (GateFlag).
func MemberOfPod(pod *corev1.Pod, fields PodFields) (Member, corev1.Container, []string, error) {
	idx, err := findEtcdContainer(pod)
	if err != nil {
		return Member{}, corev1.Container{}, nil, err
	}
	c := pod.Spec.Containers[idx]
	env, err := RuntimeEnv(c, fields)
	if err != nil {
		return Member{}, c, nil, fmt.Errorf("pod %s/%s, container %s: %w", pod.Namespace, pod.Name, c.Name, err)
	}
	argv := env.Argv(c)
	m, err := MemberFromArgv(argv, env.Environ())
	if err != nil {
		return Member{}, c, argv, fmt.Errorf("pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	m.ContainerName, m.Image = c.Name, c.Image
	return m, c, argv, nil
}

// GateFlag is the value of the start gate's own flag name ("state-dir",
// "endpoints") on a gate-wrapped command line ("<agent> gate [flags] --
// etcd ..."): the last occurrence, "--name=value" or "--name value". false
// when argv is not gate-wrapped or the flag is not set.
func GateFlag(argv []string, name string) (string, bool) {
	end := etcdArgvStart(argv)
	if end == 0 {
		return "", false
	}
	val, found := "", false
	gate := argv[2 : end-1] // between "gate" and "--"
	for i := 0; i < len(gate); i++ {
		if !strings.HasPrefix(gate[i], "-") {
			continue
		}
		body := strings.TrimPrefix(strings.TrimPrefix(gate[i], "-"), "-")
		if n, v, eq := strings.Cut(body, "="); eq && n == name {
			val, found = v, true
		} else if body == name && i+1 < len(gate) && !strings.HasPrefix(gate[i+1], "-") {
			val, found = gate[i+1], true
			i++
		}
	}
	return val, found
}

// SetArgvFlags sets etcd flags (names without dashes) on the etcd command
// line the start gate is about to exec: every occurrence on argv is
// rewritten in place; a flag argv does not carry is set in its ETCD_*
// variable when environ has one (etcd refuses a flag that shadows its
// variable), else appended. argv and environ are not modified.
func SetArgvFlags(argv, environ []string, flags map[string]string) ([]string, []string, error) {
	argv, environ = slices.Clone(argv), slices.Clone(environ)
	names := make([]string, 0, len(flags))
	for n := range flags {
		if err := checkFlagName(n); err != nil {
			return nil, nil, err
		}
		names = append(names, n)
	}
	slices.Sort(names)
	for _, name := range names {
		value := flags[name]
		found := false
		for _, f := range scanFlags(argv) {
			if f.name != name {
				continue
			}
			found = true
			switch {
			case f.valueIdx == f.nameIdx+1 && strings.HasPrefix(value, "-"):
				return nil, nil, fmt.Errorf("--%s is set as two tokens; cannot set a value starting with %q that way", name, "-")
			case f.valueIdx == f.nameIdx+1:
				argv[f.valueIdx] = value
			default:
				argv[f.nameIdx] = f.dashes + name + "=" + value
			}
		}
		if found {
			continue
		}
		key := envKey(name)
		inEnv := false
		for i, kv := range environ {
			if k, _, ok := strings.Cut(kv, "="); ok && k == key {
				environ[i], inEnv = key+"="+value, true
			}
		}
		if !inEnv {
			argv = slices.Insert(argv, flagsEnd(argv), "--"+name+"="+value)
		}
	}
	return argv, environ, nil
}
