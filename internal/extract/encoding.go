package extract

import (
	"bytes"
	"strings"
)

// The encodings the listing reports.
const (
	EncodingProtobuf = "protobuf"
	EncodingJSON     = "json"
	EncodingUnknown  = "unknown"
	// encodingEncrypted is followed by the provider: encrypted:aescbc.
	encodingEncrypted = "encrypted:"
)

// protobufMagic starts every value the API server stores as protobuf.
var protobufMagic = []byte("k8s\x00")

// encryptedMagic starts every value encrypted at rest, followed by
// <provider>:<version>:<key name>: (aescbc, aesgcm, secretbox, kms:v1/v2).
var encryptedMagic = []byte("k8s:enc:")

// Encoding names how a stored value is encoded: protobuf, json,
// encrypted:<provider> or unknown.
func Encoding(v []byte) string {
	switch {
	case bytes.HasPrefix(v, encryptedMagic):
		provider, _ := encryptionPrefix(v)
		return encodingEncrypted + provider
	case bytes.HasPrefix(v, protobufMagic):
		return EncodingProtobuf
	case bytes.HasPrefix(bytes.TrimLeft(v, " \t\r\n"), []byte("{")):
		return EncodingJSON
	}
	return EncodingUnknown
}

// encryptionPrefix returns the provider of an encrypted value and its whole
// prefix, e.g. "aescbc" and "k8s:enc:aescbc:v1:key1:". A value cut short
// (no key name) still yields what is there.
func encryptionPrefix(v []byte) (provider, prefix string) {
	const fields = 5 // k8s, enc, provider, version, key name
	head := v[:min(len(v), 512)]
	end := 0
	for i := 0; i < fields; i++ {
		j := bytes.IndexByte(head[end:], ':')
		if j < 0 {
			break
		}
		end += j + 1
	}
	prefix = string(head[:end])
	parts := strings.Split(prefix, ":")
	if len(parts) > 2 && parts[2] != "" {
		provider = parts[2]
	} else {
		provider = "unknown"
	}
	return provider, prefix
}
