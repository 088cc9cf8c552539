package extract

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/scheme"
)

// DefaultPrefix is the API server's default --etcd-prefix, as a key prefix.
const DefaultPrefix = "/registry/"

// The API server stores most resources under their plural name, without the
// group; these few live elsewhere for history's sake (kube-apiserver's
// SpecialDefaultResourcePrefixes). Selectors and listings use the resource
// name, keys the storage path.
var storagePathOfResource = map[string]string{
	"replicationcontrollers": "controllers",
	"endpoints":              "services/endpoints",
	"nodes":                  "minions",
	"services":               "services/specs",
	"ingresses":              "ingress",
}

var resourceOfStoragePath = func() map[string]string {
	m := make(map[string]string, len(storagePathOfResource))
	for r, p := range storagePathOfResource {
		m[p] = r
	}
	return m
}()

// groupOfSpecialStoragePath is the group of the resources stored at a
// special path (ingresses also exist in the old extensions group).
var groupOfSpecialStoragePath = map[string]string{"ingress": "networking.k8s.io"}

// Ref names an object by where its etcd key puts it.
type Ref struct {
	Key string
	// Resource is the name selectors use: "configmaps", "nodes" (stored as
	// minions), or group-qualified as in the key ("example.com/widgets").
	Resource string
	// Namespace is empty for cluster-scoped objects.
	Namespace, Name string
	// odd: the key has an unusual number of segments, so namespace and name
	// are a guess; the decoded object's own metadata is the better source.
	// An empty segment makes a key odd too.
	odd bool
}

// String is the -o name form: resource/namespace/name or resource/name.
func (r Ref) String() string {
	if r.Namespace == "" {
		return r.Resource + "/" + r.Name
	}
	return r.Resource + "/" + r.Namespace + "/" + r.Name
}

// normalizePrefix makes "/registry" and "/registry/" mean the same.
func normalizePrefix(prefix string) string {
	if prefix == "" {
		return DefaultPrefix
	}
	if !strings.HasSuffix(prefix, "/") {
		prefix += "/"
	}
	return prefix
}

// resourceSegments is how many leading segments of segs (a key without the
// prefix, or a selector) name the resource: two for a special two-part path
// (services/specs) or a group-qualified one (a dotted group first), else one.
func resourceSegments(segs []string, storageForm bool) int {
	if len(segs) < 2 {
		return len(segs)
	}
	if storageForm {
		if _, ok := resourceOfStoragePath[segs[0]+"/"+segs[1]]; ok {
			return 2
		}
	}
	if strings.Contains(segs[0], ".") { // built-in resources have no group in their keys
		return 2
	}
	return 1
}

// ParseKey splits an etcd key (under prefix) into resource, namespace and
// name: <resource>/<namespace>/<name> or <resource>/<name>, the resource
// being one of the forms resourceSegments knows.
func ParseKey(prefix, key string) Ref {
	segs := strings.Split(strings.TrimPrefix(key, normalizePrefix(prefix)), "/")
	n := resourceSegments(segs, true)
	storage := strings.Join(segs[:n], "/")
	r := Ref{Key: key, Resource: storage}
	if res, ok := resourceOfStoragePath[storage]; ok {
		r.Resource = res
	}
	rest := segs[n:]
	switch len(rest) {
	case 0:
		r.odd = true
	case 1:
		r.Name = rest[0]
	case 2:
		r.Namespace, r.Name = rest[0], rest[1]
	default:
		r.odd = true
		r.Resource += "/" + strings.Join(rest[:len(rest)-2], "/")
		r.Namespace, r.Name = rest[len(rest)-2], rest[len(rest)-1]
	}
	// An empty segment ("/registry/configmaps//x") is no key the API
	// server writes: its empty namespace would read as cluster-scoped.
	if slices.Contains(rest, "") {
		r.odd = true
	}
	return r
}

// GroupResource is the resource the API server would have stored this key
// for, the way its encryption config names resources (secrets is
// {"", "secrets"}, deployments {"apps", "deployments"}).
func (r Ref) GroupResource() schema.GroupResource {
	segs := strings.SplitN(r.Resource, "/", 3)
	if len(segs) >= 2 && strings.Contains(segs[0], ".") {
		return schema.GroupResource{Group: segs[0], Resource: segs[1]}
	}
	res := segs[0]
	if path, ok := storagePathOfResource[res]; ok {
		return schema.GroupResource{Group: groupOfSpecialStoragePath[path], Resource: res}
	}
	return schema.GroupResource{Group: builtinGroups()[res], Resource: res}
}

// builtinGroups maps each resource client-go knows to its group. When several
// groups have it (events: core and events.k8s.io; deployments: apps and the
// old extensions), the API server stores it for the core group if that is one
// of them, else for the group that is not extensions.
var builtinGroups = sync.OnceValue(func() map[string]string {
	groups := map[string][]string{}
	for gvk := range scheme.Scheme.AllKnownTypes() {
		if strings.HasSuffix(gvk.Kind, "List") {
			continue
		}
		plural, _ := meta.UnsafeGuessKindToResource(gvk)
		groups[plural.Resource] = append(groups[plural.Resource], gvk.Group)
	}
	out := make(map[string]string, len(groups))
	for res, gs := range groups {
		sort.Slice(gs, func(i, j int) bool {
			return groupRank(gs[i]) < groupRank(gs[j]) || (groupRank(gs[i]) == groupRank(gs[j]) && gs[i] < gs[j])
		})
		out[res] = gs[0]
	}
	return out
})

func groupRank(g string) int {
	switch g {
	case "":
		return 0
	case "extensions":
		return 2
	}
	return 1
}

// Selector is what the user asked for: a resource, maybe one object of it.
type Selector struct {
	// Resource as in Ref.Resource; empty selects everything under the prefix.
	Resource        string
	Namespace, Name string
}

// ParseSelector parses RESOURCE, RESOURCE/NAME (cluster-scoped) or
// RESOURCE/NAMESPACE/NAME; "" selects everything.
func ParseSelector(s string) (Selector, error) {
	if s == "" {
		return Selector{}, nil
	}
	segs := strings.Split(s, "/")
	for _, seg := range segs {
		if seg == "" {
			return Selector{}, fmt.Errorf("selector %q has an empty segment: want RESOURCE, RESOURCE/NAME or RESOURCE/NAMESPACE/NAME", s)
		}
	}
	n := resourceSegments(segs, false)
	sel := Selector{Resource: strings.Join(segs[:n], "/")}
	switch rest := segs[n:]; len(rest) {
	case 0:
	case 1:
		sel.Name = rest[0]
	case 2:
		sel.Namespace, sel.Name = rest[0], rest[1]
	default:
		return Selector{}, fmt.Errorf("selector %q: want RESOURCE, RESOURCE/NAME or RESOURCE/NAMESPACE/NAME", s)
	}
	return sel, nil
}

// One reports whether the selector names a single object.
func (s Selector) One() bool { return s.Name != "" }

// storagePath is where the API server keeps the selected resource.
func (s Selector) storagePath() string {
	if p, ok := storagePathOfResource[s.Resource]; ok {
		return p
	}
	return s.Resource
}

// KeyPrefix is the prefix of every key the selector's resource can have
// ("" selector: the whole prefix).
func (s Selector) KeyPrefix(prefix string) string {
	prefix = normalizePrefix(prefix)
	if s.Resource == "" {
		return prefix
	}
	return prefix + s.storagePath() + "/"
}

// Key is the one key a single-object selector names.
func (s Selector) Key(prefix string) string {
	if s.Namespace == "" {
		return s.KeyPrefix(prefix) + s.Name
	}
	return s.KeyPrefix(prefix) + s.Namespace + "/" + s.Name
}

// Matches says whether key is one the selector selects.
func (s Selector) Matches(prefix, key string) bool {
	if s.One() {
		return key == s.Key(prefix)
	}
	return strings.HasPrefix(key, s.KeyPrefix(prefix))
}
