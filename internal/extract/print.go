package extract

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"text/tabwriter"
	"unicode/utf8"

	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"
)

// The output formats.
const (
	OutputTable = "table"
	OutputYAML  = "yaml"
	OutputJSON  = "json"
	OutputName  = "name"
)

// listRow is one line of the table.
type listRow struct {
	ref         Ref
	modRevision int64
	bytes       int
	encoding    string
}

func printTable(w io.Writer, rows []listRow) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "RESOURCE\tNAMESPACE\tNAME\tMOD-REVISION\tBYTES\tENCODING")
	for _, r := range rows {
		ns := r.ref.Namespace
		if ns == "" {
			ns = "-" // keeps every line at six fields for awk and friends
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%s\n", r.ref.Resource, ns, r.ref.Name, r.modRevision, r.bytes, r.encoding)
	}
	return tw.Flush()
}

func printNames(w io.Writer, refs []Ref) error {
	for _, r := range refs {
		if _, err := fmt.Fprintln(w, r.String()); err != nil {
			return err
		}
	}
	return nil
}

// printObject prints one object alone, as `kubectl get -o yaml|json` does.
func printObject(w io.Writer, format string, obj runtime.Object) error {
	b, err := json.Marshal(obj)
	if err != nil {
		return err
	}
	return writeJSONAs(w, format, b)
}

// printList prints objects as kubectl prints several: a v1 List.
func printList(w io.Writer, format string, objs []runtime.Object) error {
	items := make([]json.RawMessage, 0, len(objs))
	for _, o := range objs {
		b, err := json.Marshal(o)
		if err != nil {
			return err
		}
		items = append(items, b)
	}
	b, err := json.Marshal(map[string]any{
		"apiVersion": "v1",
		"kind":       "List",
		"items":      items,
		"metadata":   map[string]string{"resourceVersion": ""},
	})
	if err != nil {
		return err
	}
	return writeJSONAs(w, format, b)
}

// escapeUnprintable \u-escapes, in JSON b, every character the YAML
// reader refuses raw (DEL, C1 controls, U+FEFF, U+FFFE/FFFF: JSON leaves
// them as they are). They occur only inside strings, which keep their
// value; the YAML printed quotes and escapes them. A value read from etcd
// may hold any bytes (a corrupt or hand-written one: found by
// FuzzDecodeValue), and must still print.
func escapeUnprintable(b []byte) []byte {
	var out []byte
	for i := 0; i < len(b); {
		r, n := utf8.DecodeRune(b[i:])
		if yamlPrintable(r) {
			if out != nil {
				out = append(out, b[i:i+n]...)
			}
			i += n
			continue
		}
		if out == nil {
			out = append(make([]byte, 0, len(b)+16), b[:i]...)
		}
		out = fmt.Appendf(out, `\u%04x`, r)
		i += n
	}
	if out == nil {
		return b
	}
	return out
}

// yamlPrintable is YAML 1.1's printable set (go-yaml's reader), less the
// byte-order mark it refuses inside a document and the line breaks it
// would fold inside a quoted scalar (NEL, U+2028, U+2029: read raw, they
// would not read back as themselves).
func yamlPrintable(r rune) bool {
	switch {
	case r == '\t' || r == '\n' || r == '\r':
		return true
	case r == 0x2028 || r == 0x2029:
		return false
	case r >= 0x20 && r <= 0x7e, r >= 0xa0 && r <= 0xd7ff, r >= 0x10000 && r <= 0x10ffff:
		return true
	case r >= 0xe000 && r <= 0xfffd:
		return r != 0xfeff
	}
	return false
}

// writeJSONAs writes JSON as kubectl would in format: YAML, or JSON indented
// by four spaces; keys sorted in both, as kubectl prints what the API
// server sends it.
func writeJSONAs(w io.Writer, format string, b []byte) error {
	if format == OutputYAML {
		y, err := yaml.JSONToYAML(escapeUnprintable(b))
		if err != nil {
			return err
		}
		_, err = w.Write(y)
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber() // keep int64s exact
	var v any
	if err := dec.Decode(&v); err != nil {
		return err
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "    ")
	enc.SetEscapeHTML(false) // certificates and scripts stay readable
	return enc.Encode(v)
}
