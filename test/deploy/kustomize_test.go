package deploy

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/etcd-agent/etcd-agent/internal/lab"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

// render builds the kustomization in dir with kubectl's kustomize (what
// `kubectl apply -k` runs), so the tests check the objects a cluster would
// receive.
func render(dir string) ([]*unstructured.Unstructured, error) {
	return lab.RenderKustomization(filepath.Join(binDir, "kubectl"), dir)
}

// readObjects reads the YAML documents of a file as objects (empty
// documents skipped).
func readObjects(path string) ([]*unstructured.Unstructured, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var objs []*unstructured.Unstructured
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(b)))
	for i := 1; ; i++ {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return objs, nil
		}
		if err != nil {
			return nil, fmt.Errorf("%s: document %d: %w", path, i, err)
		}
		j, err := utilyaml.ToJSON(doc)
		if err != nil {
			return nil, fmt.Errorf("%s: document %d: %w", path, i, err)
		}
		if len(bytes.TrimSpace(j)) == 0 || string(j) == "null" {
			continue
		}
		o := &unstructured.Unstructured{}
		if err := o.UnmarshalJSON(j); err != nil {
			return nil, fmt.Errorf("%s: document %d: %w", path, i, err)
		}
		objs = append(objs, o)
	}
}

func objectID(o *unstructured.Unstructured) string {
	gvk := o.GroupVersionKind()
	id := gvk.GroupKind().String() + " " + o.GetName()
	if o.GetNamespace() != "" {
		id = gvk.GroupKind().String() + " " + o.GetNamespace() + "/" + o.GetName()
	}
	return id
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
