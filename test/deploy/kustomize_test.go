package deploy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/yaml"
)

// sigs.k8s.io/kustomize is not in the module graph (and stays out of it), so
// the tests render kustomizations themselves, for the subset of kustomize
// that deploy/ uses: resources (files and directories with their own
// kustomization.yaml), patches (strategic merge, from a file, matched by the
// patch's kind and name or by an explicit target) and images. Any other
// field fails the strict decode below: a kustomization that grows a feature
// this renderer does not know fails the tests instead of being rendered
// wrong.

type kustomization struct {
	APIVersion string      `json:"apiVersion"`
	Kind       string      `json:"kind"`
	Resources  []string    `json:"resources"`
	Patches    []kustPatch `json:"patches"`
	Images     []kustImage `json:"images"`
	Labels     []any       `json:"labels"` // rejected below; listed so the error says so
}

type kustPatch struct {
	Path   string      `json:"path"`
	Target *kustTarget `json:"target"`
}

type kustTarget struct {
	Group     string `json:"group"`
	Version   string `json:"version"`
	Kind      string `json:"kind"`
	Name      string `json:"name"`
	Namespace string `json:"namespace"`
}

type kustImage struct {
	Name    string `json:"name"`
	NewName string `json:"newName"`
	NewTag  string `json:"newTag"`
	Digest  string `json:"digest"`
}

// render renders the kustomization in dir into its objects, in order.
func render(dir string) ([]*unstructured.Unstructured, error) {
	b, err := os.ReadFile(filepath.Join(dir, "kustomization.yaml"))
	if err != nil {
		return nil, err
	}
	var k kustomization
	if err := yaml.UnmarshalStrict(b, &k); err != nil {
		return nil, fmt.Errorf("%s: %w (this test renders a subset of kustomize: resources, patches, images)", dir, err)
	}
	if k.APIVersion != "kustomize.config.k8s.io/v1beta1" || k.Kind != "Kustomization" {
		return nil, fmt.Errorf("%s: not a kustomize.config.k8s.io/v1beta1 Kustomization", dir)
	}
	if len(k.Labels) > 0 {
		return nil, fmt.Errorf("%s: labels are not supported by the test renderer", dir)
	}
	var objs []*unstructured.Unstructured
	for _, r := range k.Resources {
		p := filepath.Join(dir, r)
		st, err := os.Stat(p)
		if err != nil {
			return nil, fmt.Errorf("%s: resource %s: %w", dir, r, err)
		}
		var got []*unstructured.Unstructured
		if st.IsDir() {
			got, err = render(p)
		} else {
			got, err = readObjects(p)
		}
		if err != nil {
			return nil, err
		}
		objs = append(objs, got...)
	}
	seen := map[string]bool{}
	for _, o := range objs {
		id := objectID(o)
		if seen[id] {
			return nil, fmt.Errorf("%s: %s appears twice", dir, id)
		}
		seen[id] = true
	}
	for _, p := range k.Patches {
		if p.Path == "" {
			return nil, fmt.Errorf("%s: only patches from a file (path) are supported", dir)
		}
		patches, err := readObjects(filepath.Join(dir, p.Path))
		if err != nil {
			return nil, err
		}
		for _, patch := range patches {
			if err := applyPatch(objs, patch, p.Target); err != nil {
				return nil, fmt.Errorf("%s: patch %s: %w", dir, p.Path, err)
			}
		}
	}
	for _, img := range k.Images {
		setImage(objs, img)
	}
	return objs, nil
}

// readObjects reads the YAML documents of a file as objects.
func readObjects(path string) ([]*unstructured.Unstructured, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var objs []*unstructured.Unstructured
	for i, doc := range splitDocuments(b) {
		j, err := yaml.YAMLToJSON(doc)
		if err != nil {
			return nil, fmt.Errorf("%s: document %d: %w", path, i+1, err)
		}
		if string(j) == "null" {
			continue
		}
		o := &unstructured.Unstructured{}
		if err := o.UnmarshalJSON(j); err != nil {
			return nil, fmt.Errorf("%s: document %d: %w", path, i+1, err)
		}
		objs = append(objs, o)
	}
	return objs, nil
}

func splitDocuments(b []byte) [][]byte {
	var docs [][]byte
	var cur bytes.Buffer
	for _, line := range strings.SplitAfter(string(b), "\n") {
		if strings.TrimRight(line, " \r\n") == "---" {
			docs = append(docs, append([]byte(nil), cur.Bytes()...))
			cur.Reset()
			continue
		}
		cur.WriteString(line)
	}
	return append(docs, cur.Bytes())
}

func objectID(o *unstructured.Unstructured) string {
	gvk := o.GroupVersionKind()
	id := gvk.GroupKind().String() + " " + o.GetName()
	if o.GetNamespace() != "" {
		id = gvk.GroupKind().String() + " " + o.GetNamespace() + "/" + o.GetName()
	}
	return id
}

// applyPatch applies a strategic merge patch to the one object it targets.
func applyPatch(objs []*unstructured.Unstructured, patch *unstructured.Unstructured, t *kustTarget) error {
	pgvk := patch.GroupVersionKind()
	match := func(o *unstructured.Unstructured) bool {
		gvk := o.GroupVersionKind()
		if t != nil {
			return (t.Group == "" || t.Group == gvk.Group) && (t.Version == "" || t.Version == gvk.Version) &&
				(t.Kind == "" || t.Kind == gvk.Kind) && (t.Name == "" || t.Name == o.GetName()) &&
				(t.Namespace == "" || t.Namespace == o.GetNamespace())
		}
		return gvk.GroupKind() == pgvk.GroupKind() && o.GetName() == patch.GetName() &&
			(patch.GetNamespace() == "" || patch.GetNamespace() == o.GetNamespace())
	}
	var hits []*unstructured.Unstructured
	for _, o := range objs {
		if match(o) {
			hits = append(hits, o)
		}
	}
	if len(hits) != 1 {
		return fmt.Errorf("targets %d objects (%s %s), want exactly 1", len(hits), pgvk.Kind, patch.GetName())
	}
	o := hits[0]
	typed, err := scheme.Scheme.New(o.GroupVersionKind())
	if err != nil {
		return fmt.Errorf("%s: strategic merge needs a built-in kind: %w", o.GroupVersionKind(), err)
	}
	orig, err := o.MarshalJSON()
	if err != nil {
		return err
	}
	pj, err := patch.MarshalJSON()
	if err != nil {
		return err
	}
	merged, err := strategicpatch.StrategicMergePatch(orig, pj, typed)
	if err != nil {
		return err
	}
	out := &unstructured.Unstructured{}
	if err := out.UnmarshalJSON(merged); err != nil {
		return err
	}
	o.Object = out.Object
	return nil
}

// setImage rewrites the image of every container (and init container) of
// pod templates whose image is img.Name with any tag or digest.
func setImage(objs []*unstructured.Unstructured, img kustImage) {
	for _, o := range objs {
		for _, path := range [][]string{{"spec", "template", "spec"}, {"spec"}} {
			podSpec, ok, _ := unstructured.NestedMap(o.Object, path...)
			if !ok {
				continue
			}
			changed := false
			for _, field := range []string{"containers", "initContainers"} {
				cs, _ := podSpec[field].([]any)
				for _, c := range cs {
					cm, _ := c.(map[string]any)
					image, _ := cm["image"].(string)
					if imageName(image) != img.Name {
						continue
					}
					name := img.Name
					if img.NewName != "" {
						name = img.NewName
					}
					switch {
					case img.Digest != "":
						cm["image"] = name + "@" + img.Digest
					case img.NewTag != "":
						cm["image"] = name + ":" + img.NewTag
					default:
						cm["image"] = name + strings.TrimPrefix(image, imageName(image))
					}
					changed = true
				}
			}
			if changed {
				_ = unstructured.SetNestedMap(o.Object, podSpec, path...)
			}
			break
		}
	}
}

// imageName strips the tag or digest from an image reference.
func imageName(ref string) string {
	if i := strings.Index(ref, "@"); i >= 0 {
		ref = ref[:i]
	}
	if i := strings.LastIndex(ref, ":"); i > strings.LastIndex(ref, "/") {
		ref = ref[:i]
	}
	return ref
}

// find returns the rendered object of kind and name, or nil.
func find(objs []*unstructured.Unstructured, kind, name string) *unstructured.Unstructured {
	for _, o := range objs {
		if o.GetKind() == kind && o.GetName() == name {
			return o
		}
	}
	return nil
}

// typed converts a rendered object into its Go type (e.g. *appsv1.DaemonSet),
// failing on fields the type does not have.
func typed(o *unstructured.Unstructured, into any) error {
	j, err := o.MarshalJSON()
	if err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(j))
	dec.DisallowUnknownFields()
	return dec.Decode(into)
}
