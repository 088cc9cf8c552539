package extract

import (
	"bytes"
	"context"
	"fmt"
	"strconv"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/scheme"
)

// Decrypter turns a value encrypted at rest back into what the API server
// encrypted. key is the etcd key (the API server's authenticated data) and
// gr the resource it was stored for (what its EncryptionConfiguration names).
type Decrypter func(ctx context.Context, key []byte, gr schema.GroupResource, value []byte) ([]byte, error)

// decoder decodes stored values into the objects `kubectl get` would print.
type decoder struct {
	decrypt Decrypter // nil: encrypted values are an error naming the provider
}

// decode returns the object stored in kv, apiVersion and kind set and
// resourceVersion set to the key's mod revision, as the API server serves it.
func (d decoder) decode(ctx context.Context, ref Ref, kv *mvccpb.KeyValue) (runtime.Object, error) {
	value := kv.Value
	if bytes.HasPrefix(value, encryptedMagic) {
		plain, err := d.decryptValue(ctx, ref, value)
		if err != nil {
			return nil, err
		}
		value = plain
	}
	obj, err := decodeValue(value)
	if err != nil {
		return nil, err
	}
	if m, err := meta.Accessor(obj); err == nil {
		m.SetResourceVersion(strconv.FormatInt(kv.ModRevision, 10))
	}
	return obj, nil
}

func (d decoder) decryptValue(ctx context.Context, ref Ref, value []byte) ([]byte, error) {
	provider, prefix := encryptionPrefix(value)
	if d.decrypt == nil {
		return nil, fmt.Errorf("encrypted at rest (%s): decrypting is not supported by this build; it can list the key but not show the object", prefix)
	}
	plain, err := d.decrypt(ctx, []byte(ref.Key), ref.GroupResource(), value)
	if err != nil {
		if provider == "kms" {
			return nil, fmt.Errorf("encrypted at rest with KMS (%s), which needs the KMS plugin's socket from the encryption config to be reachable from here: %w", prefix, err)
		}
		return nil, fmt.Errorf("decrypt (%s) as %s: %w", prefix, ref.GroupResource(), err)
	}
	if bytes.HasPrefix(plain, encryptedMagic) {
		return nil, fmt.Errorf("decrypting (%s) left an encrypted value: the encryption config has no matching provider for %s", prefix, ref.GroupResource())
	}
	return plain, nil
}

// decodeValue decodes protobuf or JSON with client-go's scheme (built-in
// types), falling back to unstructured for JSON of types it does not know
// (custom resources). Typed objects get apiVersion and kind from the GVK
// the decoder found, since decoding leaves them empty.
func decodeValue(value []byte) (runtime.Object, error) {
	enc := Encoding(value)
	if enc != EncodingProtobuf && enc != EncodingJSON {
		return nil, fmt.Errorf("value is not a Kubernetes object (encoding %s, %d bytes)", enc, len(value))
	}
	obj, gvk, err := scheme.Codecs.UniversalDeserializer().Decode(value, nil, nil)
	if err == nil {
		obj.GetObjectKind().SetGroupVersionKind(*gvk)
		return obj, nil
	}
	if enc == EncodingProtobuf {
		if runtime.IsNotRegisteredError(err) {
			return nil, fmt.Errorf("protobuf-encoded type this tool does not carry (it knows client-go's built-in types; aggregated APIs' own types such as CustomResourceDefinition or APIService are not among them): %w", err)
		}
		return nil, fmt.Errorf("protobuf: %w", err)
	}
	u := &unstructured.Unstructured{}
	if _, _, uerr := unstructured.UnstructuredJSONScheme.Decode(value, nil, u); uerr != nil {
		return nil, fmt.Errorf("json: %w", uerr)
	}
	return u, nil
}
