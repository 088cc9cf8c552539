package manifest

import (
	"encoding/json"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
)

// ClientURLsAsideAnnotation carries, on a static pod's manifest, the client
// URLs a learner's start set aside (ClientURLsAside as JSON): the manifest
// itself says what to put back, whatever happens to the agent or its
// journal in between (docs/recovery.md, "etcd versions": a 3.5 learner
// refuses writes sent to its client URL with Unavailable, which clients do
// not send elsewhere).
const ClientURLsAsideAnnotation = "etcd-agent.io/client-urls-aside"

// ClientURLsAside is what a set-aside start changed: the member's own
// --listen-client-urls and --advertise-client-urls, and the private URL it
// listens on instead.
type ClientURLsAside struct {
	Listen    string `json:"listen"`
	Advertise string `json:"advertise"`
	Private   string `json:"private"`
}

// ClientURLsAsideOf reads the annotation of a set-aside manifest.
func ClientURLsAsideOf(data []byte) (ClientURLsAside, bool, error) {
	pod, err := decodePod(data)
	if err != nil {
		return ClientURLsAside{}, false, err
	}
	v, ok := pod.Annotations[ClientURLsAsideAnnotation]
	if !ok {
		return ClientURLsAside{}, false, nil
	}
	var a ClientURLsAside
	if err := json.Unmarshal([]byte(v), &a); err != nil || a.Listen == "" || a.Advertise == "" {
		return a, true, fmt.Errorf("annotation %s is not the agent's (%q): %v", ClientURLsAsideAnnotation, v, err)
	}
	return a, true, nil
}

// SetClientURLsAside returns data with etcd listening for clients only on
// private, and advertising its own client URLs and private (the member's
// identity, its first client URL, stays; a probe finds private). The
// originals go into the annotation; a manifest already set aside keeps
// the originals it recorded.
func SetClientURLsAside(data []byte, private string) ([]byte, error) {
	if private == "" {
		return nil, errors.New("no private client URL")
	}
	a, ok, err := ClientURLsAsideOf(data)
	if err != nil {
		return nil, err
	}
	if !ok {
		if a, err = OwnClientURLs(data); err != nil {
			return nil, err
		}
	}
	a.Private = private
	out, err := SetFlags(data, map[string]string{"listen-client-urls": private, "advertise-client-urls": a.Advertise + "," + private})
	if err != nil {
		return nil, err
	}
	b, _ := json.Marshal(a)
	return setAnnotation(out, ClientURLsAsideAnnotation, string(b))
}

// RestoreClientURLs returns data with the client URLs a set-aside start
// recorded put back and the annotation gone; data itself (false) when
// nothing is set aside.
func RestoreClientURLs(data []byte) ([]byte, bool, error) {
	a, ok, err := ClientURLsAsideOf(data)
	if err != nil || !ok {
		return data, false, err
	}
	out, err := SetFlags(data, map[string]string{"listen-client-urls": a.Listen, "advertise-client-urls": a.Advertise})
	if err != nil {
		return nil, false, err
	}
	out, err = setAnnotation(out, ClientURLsAsideAnnotation, "")
	return out, err == nil, err
}

// OwnClientURLs are the member's client URLs as its manifest writes them
// ($(VAR) references kept, so they come back as they were); both flags
// must be set (etcd's defaults are not written back).
func OwnClientURLs(data []byte) (ClientURLsAside, error) {
	pod, err := decodePod(data)
	if err != nil {
		return ClientURLsAside{}, err
	}
	idx, err := findEtcdContainer(pod)
	if err != nil {
		return ClientURLsAside{}, err
	}
	c := pod.Spec.Containers[idx]
	cfg := newEtcdConfig(c)
	var a ClientURLsAside
	if a.Listen, err = rawValue(c, cfg, "listen-client-urls"); err != nil {
		return a, err
	}
	if a.Advertise, err = rawValue(c, cfg, "advertise-client-urls"); err != nil {
		return a, err
	}
	if a.Listen == "" || a.Advertise == "" {
		return a, errors.New("the manifest sets no --listen-client-urls or --advertise-client-urls: etcd's defaults could not be put back")
	}
	return a, nil
}

// setAnnotation sets (value "" removes) one annotation, editing the
// manifest as a generic document as SetFlags does.
func setAnnotation(data []byte, key, value string) ([]byte, error) {
	return editDoc(data, func(doc map[string]any) error {
		meta, _ := doc["metadata"].(map[string]any)
		if meta == nil {
			meta = map[string]any{}
			doc["metadata"] = meta
		}
		ann, _ := meta["annotations"].(map[string]any)
		if ann == nil {
			ann = map[string]any{}
		}
		if value == "" {
			delete(ann, key)
		} else {
			ann[key] = value
		}
		if len(ann) == 0 {
			delete(meta, "annotations")
		} else {
			meta["annotations"] = ann
		}
		return nil
	})
}

// rawValue is --flag's value as the manifest writes it (its last
// occurrence on the command line, else its ETCD_* variable), checked to
// resolve (cfg.Value); "" when unset.
func rawValue(c corev1.Container, cfg etcdConfig, flag string) (string, error) {
	if _, err := cfg.Value(flag); err != nil {
		return "", err
	}
	if f, ok := lastFlag(cfg.flags, flag); ok {
		return f.value, nil
	}
	raw := ""
	for _, e := range c.Env {
		if e.Name == envKey(flag) {
			raw = e.Value
		}
	}
	return raw, nil
}
