package extract

import (
	"bytes"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// A value with characters YAML refuses raw (DEL, a C1 control, U+FFFE)
// prints as YAML, and reads back the same (FuzzDecodeValue found a Secret
// whose namespace held a DEL: -o yaml failed).
func TestYAMLPrintsAValueWithUnprintableCharacters(t *testing.T) {
	in := "a\x7fb\u0086c\ufffed\te\u00e9f\u0085g\u2028h\u2029i"
	cm := &corev1.ConfigMap{TypeMeta: metav1.TypeMeta{Kind: "ConfigMap", APIVersion: "v1"},
		ObjectMeta: metav1.ObjectMeta{Name: "x", Namespace: "n\x7f"}, Data: map[string]string{"k": in}}
	var out bytes.Buffer
	if err := printObject(&out, OutputYAML, cm); err != nil {
		t.Fatal(err)
	}
	var back corev1.ConfigMap
	if err := yaml.Unmarshal(out.Bytes(), &back); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if back.Data["k"] != in || back.Namespace != "n\x7f" {
		t.Fatalf("read back %q in %q, want %q in %q\n%s", back.Data["k"], back.Namespace, in, "n\x7f", out.String())
	}
	if got := escapeUnprintable([]byte(`{"a":"plain é"}`)); string(got) != `{"a":"plain é"}` {
		t.Fatalf("printable JSON changed: %s", got)
	}
}
