package manifest

import (
	"fmt"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// flagArg is one flag found on a container's command line. Indexes point into
// argv (Command followed by Args) so SetFlags can rewrite the raw tokens.
type flagArg struct {
	name     string
	dashes   string // "-" or "--", kept when the token is rewritten
	value    string // raw, before $(VAR) expansion
	nameIdx  int    // token holding the flag name
	valueIdx int    // token holding the value: nameIdx for --f=v, nameIdx+1 for "--f v", -1 for none
}

// scanFlags finds the flags on a command line the way Go's flag package (and
// so etcd) reads them: "-f" or "--f", with "=value" or the next token as the
// value, up to a "--" terminator. Tokens that are not flags (the binary, "sh")
// are skipped rather than ending the scan, so a wrapper's own flags are seen
// too; they are harmless because only etcd's flag names are looked up.
//
// A flag followed by another flag has no value (a bool such as
// --client-cert-auth); the next token is taken as a value only when it does
// not start with "-".
func scanFlags(argv []string) []flagArg {
	var flags []flagArg
	for i := etcdArgvStart(argv); i < len(argv); i++ {
		tok := argv[i]
		if tok == "--" {
			break
		}
		if len(tok) < 2 || tok[0] != '-' {
			continue
		}
		dashes := "-"
		if tok[1] == '-' {
			dashes = "--"
		}
		body := tok[len(dashes):]
		if body == "" || body[0] == '-' || body[0] == '=' {
			continue // "---x" and "-=x" are not flags to Go's flag package
		}
		f := flagArg{name: body, dashes: dashes, nameIdx: i, valueIdx: -1}
		if name, value, ok := strings.Cut(body, "="); ok {
			f.name, f.value, f.valueIdx = name, value, i
		} else if i+1 < len(argv) && !strings.HasPrefix(argv[i+1], "-") {
			f.value, f.valueIdx = argv[i+1], i+1
			i++
		}
		flags = append(flags, f)
	}
	return flags
}

// flagsEnd is where etcd's flags end on argv: the index of the "--" that
// ends them (Go's flag package reads nothing after it), else len(argv). A
// flag added to the command line goes there, where etcd still sees it.
func flagsEnd(argv []string) int {
	for i := etcdArgvStart(argv); i < len(argv); i++ {
		if argv[i] == "--" {
			return i
		}
	}
	return len(argv)
}

// GateSubcommand is the agent's start gate; as a wrapper it runs
// "<etcd-agent> gate [gate flags] -- <etcd> [etcd flags]", checks, then execs etcd.
const GateSubcommand = "gate"

// etcdArgvStart is the index of the etcd binary in argv: 0, or the token
// after the start gate wrapper's "--" (the gate's own flags are not etcd's).
// That "--" comes after "gate": a "--" before it ends nothing of the gate's.
func etcdArgvStart(argv []string) int {
	if len(argv) >= 2 && argv[1] == GateSubcommand {
		for i := 2; i+1 < len(argv); i++ {
			if argv[i] == "--" {
				return i + 1
			}
		}
	}
	return 0
}

// lastFlag returns the last occurrence of a flag: etcd keeps the last value
// when a flag is repeated.
func lastFlag(flags []flagArg, name string) (flagArg, bool) {
	for i := len(flags) - 1; i >= 0; i-- {
		if flags[i].name == name {
			return flags[i], true
		}
	}
	return flagArg{}, false
}

// envKey is etcd's environment variable for a flag: data-dir => ETCD_DATA_DIR.
func envKey(flag string) string {
	return "ETCD_" + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
}

// etcdConfig answers "which value does etcd see for --flag" for one container.
type etcdConfig struct {
	argv  []string
	flags []flagArg
	env   envVars
}

func newEtcdConfig(c corev1.Container) etcdConfig {
	argv := append(append([]string{}, c.Command...), c.Args...)
	return etcdConfig{argv: argv, flags: scanFlags(argv), env: resolveEnv(c.Env)}
}

// Value returns the effective value of an etcd flag ("" when unset). It fails
// when the value depends on something only the kubelet knows at runtime
// (valueFrom), because a guessed identity is worse than none.
func (c etcdConfig) Value(flag string) (string, error) {
	if f, ok := lastFlag(c.flags, flag); ok {
		v, unresolved := c.env.expand(f.value)
		if len(unresolved) > 0 {
			return "", fmt.Errorf("--%s=%s refers to %s, set at runtime (valueFrom) and unknown from the manifest alone", flag, f.value, strings.Join(unresolved, ", "))
		}
		return v, nil
	}
	key := envKey(flag)
	if c.env.runtimeOnly[key] {
		return "", fmt.Errorf("%s is set at runtime (valueFrom or a reference to one) and unknown from the manifest alone", key)
	}
	return c.env.values[key], nil
}

// envVars are a container's environment variables as the kubelet would set
// them, minus those only known at runtime.
type envVars struct {
	values      map[string]string
	runtimeOnly map[string]bool // valueFrom, or a value that refers to one
}

// resolveEnv evaluates env in order, as the kubelet does: each value may refer
// to variables defined before it, and a later definition replaces an earlier
// one.
func resolveEnv(env []corev1.EnvVar) envVars {
	e, _ := resolveEnvFrom(env, nil)
	return e
}

// resolveEnvFrom is resolveEnv with the valueFrom references runtime can
// answer (nil: none, every valueFrom is runtime-only); its error is runtime's.
func resolveEnvFrom(env []corev1.EnvVar, runtime func(corev1.EnvVar) (string, error)) (envVars, error) {
	e := envVars{values: map[string]string{}, runtimeOnly: map[string]bool{}}
	for _, v := range env {
		// A value is expanded before it replaces an earlier definition, so
		// it may refer to that one (the kubelet does the same).
		var val string
		runtimeOnly := false
		switch {
		case v.ValueFrom != nil && runtime == nil:
			runtimeOnly = true
		case v.ValueFrom != nil:
			var err error
			if val, err = runtime(v); err != nil {
				return e, err
			}
		default:
			var unresolved []string
			val, unresolved = e.expand(v.Value)
			runtimeOnly = len(unresolved) > 0
		}
		delete(e.values, v.Name)
		delete(e.runtimeOnly, v.Name)
		if runtimeOnly {
			e.runtimeOnly[v.Name] = true
		} else {
			e.values[v.Name] = val
		}
	}
	return e, nil
}

// expand applies Kubernetes' $(VAR) expansion: "$$" is a literal "$", and a
// reference to an undefined variable is left as written (the kubelet does the
// same). unresolved names the referenced variables only known at runtime.
func (e envVars) expand(s string) (expanded string, unresolved []string) {
	if !strings.Contains(s, "$") {
		return s, nil
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '$' || i+1 == len(s) {
			b.WriteByte(s[i])
			continue
		}
		switch next := s[i+1]; {
		case next == '$':
			b.WriteByte('$')
			i++
		case next == '(':
			end := strings.IndexByte(s[i+2:], ')')
			if end < 0 { // incomplete reference: kept as written
				b.WriteString("$(")
				i++
				continue
			}
			name := s[i+2 : i+2+end]
			switch v, ok := e.values[name]; {
			case ok:
				b.WriteString(v)
			case e.runtimeOnly[name]:
				unresolved = append(unresolved, "$("+name+")")
				b.WriteString("$(" + name + ")")
			default:
				b.WriteString("$(" + name + ")")
			}
			i += 2 + end
		default:
			b.WriteByte('$')
		}
	}
	return b.String(), unresolved
}

// escapeExpansion makes s survive $(VAR) expansion unchanged.
func escapeExpansion(s string) string {
	return strings.ReplaceAll(s, "$", "$$")
}

// BoolOn says whether etcd sees bool flag on, reading it as etcd does:
// the last flag wins over ETCD_*, a bare "--flag" is on, "--flag=v" is
// strconv.ParseBool(v). Where etcd's reading is uncertain it answers on,
// for flags that make the agent refuse something: "--flag v" (Go's flag
// package takes no separate value for a bool: on, and etcd then refuses
// the stray "v"), an unreadable value, a value only known at runtime.
func (c etcdConfig) BoolOn(flag string) bool {
	parse := func(v string) bool {
		b, err := strconv.ParseBool(v)
		return err != nil || b
	}
	if f, ok := lastFlag(c.flags, flag); ok {
		if f.valueIdx != f.nameIdx {
			return true
		}
		v, unresolved := c.env.expand(f.value)
		return len(unresolved) > 0 || parse(v)
	}
	key := envKey(flag)
	if c.env.runtimeOnly[key] {
		return true
	}
	v, ok := c.env.values[key]
	return ok && v != "" && parse(v) // an empty variable is unset
}
