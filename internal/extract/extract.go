package extract

import (
	"context"
	"fmt"
	"io"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
)

// Options says what to extract and how to print it.
type Options struct {
	// Prefix is the API server's --etcd-prefix (default DefaultPrefix).
	Prefix string
	// Selector is RESOURCE, RESOURCE/NAME or RESOURCE/NAMESPACE/NAME; empty
	// selects every key under the prefix.
	Selector string
	// Output is OutputTable, OutputYAML, OutputJSON or OutputName.
	Output string
	// Decrypt, when set, decrypts values encrypted at rest; when nil they
	// are listed as encrypted:<provider> and cannot be shown.
	Decrypt Decrypter
	// Out gets the result; Log gets notes (revision, skipped objects).
	Out, Log io.Writer
}

// ValidateOutput says whether format is one a user may ask for (the table
// is what a listing without a format gets).
func ValidateOutput(format string) error {
	switch format {
	case OutputYAML, OutputJSON, OutputName:
		return nil
	}
	return fmt.Errorf("bad -o %q: want yaml, json or name", format)
}

// NotFoundError says which key a single-object selector tried.
type NotFoundError struct {
	Selector string
	Key      string
	// DeletedAt is the revision that deleted the key, when the db still
	// holds that tombstone (0: unknown, or it never existed).
	DeletedAt int64
	Revision  int64
}

func (e *NotFoundError) Error() string {
	if e.DeletedAt != 0 {
		return fmt.Sprintf("%s not found: key %s was deleted at revision %d (db revision %d)", e.Selector, e.Key, e.DeletedAt, e.Revision)
	}
	return fmt.Sprintf("%s not found: no key %s at db revision %d (namespaced resources need RESOURCE/NAMESPACE/NAME, cluster-scoped ones RESOURCE/NAME)",
		e.Selector, e.Key, e.Revision)
}

// Run reads what o selects from db and prints it.
func Run(ctx context.Context, db *DB, o Options) error {
	if o.Output != OutputTable {
		if err := ValidateOutput(o.Output); err != nil {
			return err
		}
	}
	prefix := normalizePrefix(o.Prefix)
	sel, err := ParseSelector(o.Selector)
	if err != nil {
		return err
	}
	c, err := db.Read(func(key string) bool { return sel.Matches(prefix, key) })
	if err != nil {
		return err
	}
	scope := sel.KeyPrefix(prefix) + "*"
	if sel.One() {
		scope = sel.Key(prefix)
	}
	fmt.Fprintf(o.Log, "extract: %s: revision %d, compacted at %d; %d live key(s) match %s\n",
		db.Path(), c.Revision, c.CompactRevision, len(c.KVs), scope)
	d := decoder{decrypt: o.Decrypt}
	if sel.One() {
		return runOne(ctx, d, prefix, sel, o, c)
	}
	return runMany(ctx, d, prefix, o, c)
}

func runOne(ctx context.Context, d decoder, prefix string, sel Selector, o Options, c *Contents) error {
	key := sel.Key(prefix)
	if len(c.KVs) == 0 {
		return &NotFoundError{Selector: o.Selector, Key: key, DeletedAt: c.DeletedAt[key], Revision: c.Revision}
	}
	kv := c.KVs[0]
	ref := ParseKey(prefix, key)
	if o.Output == OutputName {
		return printNames(o.Out, []Ref{ref})
	}
	obj, err := d.decode(ctx, ref, kv)
	if err != nil {
		return fmt.Errorf("%s (key %s, revision %d): %w", ref, key, kv.ModRevision, err)
	}
	format := o.Output
	if format == OutputTable {
		format = OutputYAML
	}
	return printObject(o.Out, format, obj)
}

// runMany lists (table, name) or prints (yaml, json) every selected key.
// An object that cannot be decoded is skipped with a note, the rest still
// printed; the error at the end only makes the exit code say so.
func runMany(ctx context.Context, d decoder, prefix string, o Options, c *Contents) error {
	switch o.Output {
	case OutputTable:
		rows := make([]listRow, 0, len(c.KVs))
		for _, kv := range c.KVs {
			rows = append(rows, listRow{ref: displayRef(prefix, kv), modRevision: kv.ModRevision, bytes: len(kv.Value), encoding: Encoding(kv.Value)})
		}
		return printTable(o.Out, rows)
	case OutputName:
		refs := make([]Ref, 0, len(c.KVs))
		for _, kv := range c.KVs {
			refs = append(refs, displayRef(prefix, kv))
		}
		return printNames(o.Out, refs)
	}
	objs := make([]runtime.Object, 0, len(c.KVs))
	skipped := 0
	for _, kv := range c.KVs {
		ref := ParseKey(prefix, string(kv.Key))
		obj, err := d.decode(ctx, ref, kv)
		if err != nil {
			skipped++
			fmt.Fprintf(o.Log, "extract: skipped %s (key %s, revision %d): %v\n", ref, kv.Key, kv.ModRevision, err)
			continue
		}
		objs = append(objs, obj)
	}
	if err := printList(o.Out, o.Output, objs); err != nil {
		return err
	}
	if skipped > 0 {
		return fmt.Errorf("%d of %d object(s) could not be decoded and were left out (see the notes above)", skipped, len(c.KVs))
	}
	return nil
}

// displayRef is the key's Ref, except that for a key of unusual shape the
// object's own namespace and name (when it decodes without decrypting) win.
func displayRef(prefix string, kv *mvccpb.KeyValue) Ref {
	ref := ParseKey(prefix, string(kv.Key))
	if !ref.odd {
		return ref
	}
	obj, err := decodeValue(kv.Value)
	if err != nil {
		return ref
	}
	if m, err := meta.Accessor(obj); err == nil && m.GetName() != "" {
		ref.Namespace, ref.Name = m.GetNamespace(), m.GetName()
	}
	return ref
}
