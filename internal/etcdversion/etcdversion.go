// Package etcdversion reads etcd versions where a node states them: a
// member's Status ("3.5.36"), the cluster version etcd serves at /version
// ("3.5.0"), and the image tag a manifest or pod runs
// ("registry.k8s.io/etcd:3.5.36-0"). Only the minor matters to the rules
// that use it (docs/recovery.md, "etcd versions").
package etcdversion

import (
	"strconv"
	"strings"
)

// Minor is an etcd major.minor; the zero value is unknown.
type Minor struct{ Major, Minor int }

// Known says whether m was read.
func (m Minor) Known() bool { return m.Major > 0 }

func (m Minor) String() string {
	if !m.Known() {
		return "unknown"
	}
	return strconv.Itoa(m.Major) + "." + strconv.Itoa(m.Minor)
}

// Less orders minors (3.5 < 3.6 < 4.0).
func (m Minor) Less(o Minor) bool {
	return m.Major < o.Major || m.Major == o.Major && m.Minor < o.Minor
}

// Next is the minor after m (etcd supports one minor of skew: a 3.6 member
// joins a 3.5 cluster, a 3.7 one does not).
func (m Minor) Next() Minor { return Minor{m.Major, m.Minor + 1} }

// Parse reads the minor of a version such as "3.5.36", "v3.6.0", "3.5" or
// "3.5.0-rc.1"; unknown when v is not one.
func Parse(v string) Minor {
	parts := strings.SplitN(strings.TrimPrefix(v, "v"), ".", 3)
	if len(parts) < 2 {
		return Minor{}
	}
	major, err1 := strconv.Atoi(parts[0])
	minor, err2 := strconv.Atoi(parts[1])
	if err1 != nil || err2 != nil || major <= 0 || minor < 0 {
		return Minor{}
	}
	return Minor{major, minor}
}

// FromImage is the etcd version an image reference names in its tag, as
// kubeadm ("registry.k8s.io/etcd:3.5.21-0"), etcd's own images
// ("gcr.io/etcd-development/etcd:v3.6.0", "quay.io/coreos/etcd:v3.5.17")
// and bitnami ("bitnami/etcd:3.5.17-debian-12-r0") write it; "" when the
// image has no such tag (or one that is not a 3.x: a release number) (a digest only, "latest", a lab's "lab"): then the
// version the learner will run is unknown.
func FromImage(image string) string {
	ref, _, _ := strings.Cut(image, "@") // a tag may come with a digest
	i := strings.LastIndex(ref, ":")
	if i < 0 || strings.Contains(ref[i+1:], "/") { // a registry's port, no tag
		return ""
	}
	tag := strings.TrimPrefix(ref[i+1:], "v")
	end := 0
	for dots := 0; end < len(tag); end++ {
		c := tag[end]
		if c == '.' {
			dots++
			if dots > 2 {
				break
			}
			continue
		}
		if c < '0' || c > '9' {
			break
		}
	}
	v := strings.TrimSuffix(tag[:end], ".")
	if m := Parse(v); strings.Count(v, ".") < 1 || m.Major != 3 || m.Minor < 4 {
		// etcd has been 3.x since 2016, with learners since 3.4; another
		// number is not etcd's (OpenShift tags its etcd image with the
		// release, "4.18"; kops' etcd-manager "v3.0.20240618").
		return ""
	}
	return v
}
