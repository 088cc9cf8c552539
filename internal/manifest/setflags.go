package manifest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"path"
	"slices"
	"sort"
	"strings"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

// SetFlags returns a copy of a static-pod manifest with the given etcd flags
// (names without dashes, e.g. "initial-cluster-state") set in the etcd
// container:
//   - a flag on the command line is rewritten in place, keeping its form
//     ("--f=v" or "--f v"); every occurrence is rewritten so no stale copy wins;
//   - a flag set only through its ETCD_* variable gets the new value there,
//     because etcd refuses to start when a flag shadows its variable;
//   - otherwise the flag is appended (to Args when the container has Args,
//     else to Command).
//
// Everything else is kept semantically: the manifest is edited as a generic
// document, so fields unknown to this package survive, but comments and key
// order do not (the output is YAML with sorted keys).
func SetFlags(data []byte, flags map[string]string) ([]byte, error) {
	pod, err := decodePod(data)
	if err != nil {
		return nil, err
	}
	idx, err := findEtcdContainer(pod)
	if err != nil {
		return nil, err
	}
	names := make([]string, 0, len(flags))
	for name, value := range flags {
		if err := checkFlagName(name); err != nil {
			return nil, err
		}
		if !utf8.ValidString(value) {
			return nil, fmt.Errorf("the value for --%s is not valid UTF-8, which a manifest cannot carry: %q", name, value)
		}
		names = append(names, name)
	}
	sort.Strings(names) // appended flags come out in a stable order

	c := pod.Spec.Containers[idx]
	edit := containerEdit{command: c.Command, args: c.Args, env: c.Env}
	for _, name := range names {
		if err := edit.set(c.Name, name, flags[name]); err != nil {
			return nil, err
		}
	}

	out, err := applyEdit(data, idx, edit)
	if err != nil {
		return nil, err
	}
	if err := verifyFlags(out, flags); err != nil {
		return nil, fmt.Errorf("internal error: rewritten manifest does not carry the requested flags: %w", err)
	}
	return out, nil
}

func checkFlagName(name string) error {
	if name == "" || strings.HasPrefix(name, "-") || strings.ContainsAny(name, "= \t\n") || !utf8.ValidString(name) {
		return fmt.Errorf("invalid etcd flag name %q (want e.g. %q, without dashes or value)", name, "initial-cluster-state")
	}
	return nil
}

// containerEdit holds the etcd container's command line and environment
// while flags are set.
type containerEdit struct {
	command, args []string
	env           []corev1.EnvVar

	commandChanged, argsChanged bool
	envChanged                  []int // indexes into env
}

func (e *containerEdit) argv() []string {
	return append(append([]string{}, e.command...), e.args...)
}

// setToken replaces argv token i, wherever it lives.
func (e *containerEdit) setToken(i int, tok string) {
	if i < len(e.command) {
		e.command = append([]string{}, e.command...)
		e.command[i] = tok
		e.commandChanged = true
		return
	}
	i -= len(e.command)
	e.args = append([]string{}, e.args...)
	e.args[i] = tok
	e.argsChanged = true
}

func (e *containerEdit) set(container, name, value string) error {
	// The kubelet expands $(VAR) in command, args and env values; escape so
	// etcd sees exactly value.
	escaped := escapeExpansion(value)

	found := false
	for _, f := range scanFlags(e.argv()) {
		if f.name != name {
			continue
		}
		found = true
		switch {
		case f.valueIdx == f.nameIdx+1 && strings.HasPrefix(escaped, "-"):
			// "--f -x" would read as two flags.
			return fmt.Errorf("etcd container %q sets --%s as two tokens; cannot set a value starting with %q that way: edit the manifest by hand", container, name, "-")
		case f.valueIdx == f.nameIdx+1:
			e.setToken(f.valueIdx, escaped)
		default:
			e.setToken(f.nameIdx, f.dashes+name+"="+escaped)
		}
	}
	if found {
		return nil
	}

	key := envKey(name)
	for i := len(e.env) - 1; i >= 0; i-- { // the last definition is the one in effect
		if e.env[i].Name != key {
			continue
		}
		if e.env[i].ValueFrom != nil {
			return fmt.Errorf("etcd container %q takes %s from valueFrom; cannot set --%s (etcd refuses a flag that shadows its variable): edit the manifest by hand", container, key, name)
		}
		if value == "" {
			return fmt.Errorf("etcd container %q sets --%s through %s, and etcd ignores an empty variable: cannot set it to an empty value", container, name, key)
		}
		e.env = append([]corev1.EnvVar{}, e.env...)
		e.env[i].Value = escaped
		e.envChanged = append(e.envChanged, i)
		return nil
	}

	// Appending only reaches etcd when the container runs etcd itself, not a
	// shell script that starts it.
	argv := e.argv()
	direct := len(argv) > 0 && path.Base(argv[etcdArgvStart(argv)]) == "etcd" ||
		len(e.command) == 0 && len(e.args) > 0 && strings.HasPrefix(e.args[0], "-")
	if !direct {
		return fmt.Errorf("etcd container %q does not run etcd directly (argv %q); cannot add --%s safely: edit the manifest by hand", container, argv, name)
	}
	// Appended, or inserted before a "--" that ends etcd's flags.
	tok := "--" + name + "=" + escaped
	switch end := flagsEnd(argv); {
	case end < len(e.command):
		e.command = slices.Insert(slices.Clone(e.command), end, tok)
		e.commandChanged = true
	case end < len(argv) || len(e.args) > 0 || len(e.command) == 0:
		e.args = slices.Insert(slices.Clone(e.args), end-len(e.command), tok)
		e.argsChanged = true
	default:
		e.command = append(slices.Clone(e.command), tok)
		e.commandChanged = true
	}
	return nil
}

// applyEdit writes the edited command, args and env values of container idx
// into the manifest, treated as a generic document so nothing else changes.
func applyEdit(data []byte, idx int, e containerEdit) ([]byte, error) {
	return editDoc(data, func(doc map[string]any) error { return e.applyTo(doc, idx) })
}

// editDoc edits the manifest as a generic document: fields unknown to the
// Pod type survive, integers stay exact; the output is YAML with sorted keys.
func editDoc(data []byte, edit func(doc map[string]any) error) ([]byte, error) {
	j, err := yaml.YAMLToJSON(data)
	if err != nil {
		return nil, fmt.Errorf("parse manifest as YAML: %w", err)
	}
	dec := json.NewDecoder(bytes.NewReader(j))
	dec.UseNumber() // keep integers exact (no float64 round trip)
	var doc map[string]any
	if err := dec.Decode(&doc); err != nil {
		return nil, fmt.Errorf("parse manifest: %w", err)
	}
	if err := edit(doc); err != nil {
		return nil, err
	}
	j, err = json.Marshal(doc)
	if err != nil {
		return nil, fmt.Errorf("encode manifest: %w", err)
	}
	return yaml.JSONToYAML(j)
}

// applyTo writes the edit into container #idx of doc.
func (e containerEdit) applyTo(doc map[string]any, idx int) error {
	spec, _ := doc["spec"].(map[string]any)
	containers, _ := spec["containers"].([]any)
	if idx >= len(containers) {
		return fmt.Errorf("manifest has no container #%d", idx)
	}
	container, ok := containers[idx].(map[string]any)
	if !ok {
		return fmt.Errorf("container #%d is not an object", idx)
	}
	if e.commandChanged {
		container["command"] = e.command
	}
	if e.argsChanged {
		container["args"] = e.args
	}
	if len(e.envChanged) > 0 {
		env, _ := container["env"].([]any)
		for _, i := range e.envChanged {
			var v map[string]any
			if i < len(env) {
				v, _ = env[i].(map[string]any)
			}
			if v == nil || v["name"] != e.env[i].Name {
				return fmt.Errorf("env #%d of container #%d is not the variable %s", i, idx, e.env[i].Name)
			}
			v["value"] = e.env[i].Value
		}
	}
	return nil
}

// verifyFlags checks that etcd would see the requested values in the
// rewritten manifest.
func verifyFlags(data []byte, flags map[string]string) error {
	pod, err := decodePod(data)
	if err != nil {
		return err
	}
	idx, err := findEtcdContainer(pod)
	if err != nil {
		return err
	}
	cfg := newEtcdConfig(pod.Spec.Containers[idx])
	for name, want := range flags {
		got, err := cfg.Value(name)
		if err != nil {
			return err
		}
		if got != want {
			return fmt.Errorf("--%s is %q, want %q", name, got, want)
		}
	}
	return nil
}
