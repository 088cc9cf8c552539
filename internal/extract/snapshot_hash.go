package extract

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"io"
	"os"
)

// reportSnapshotHash checks the sha256 that `etcdctl snapshot save` appends
// to the bbolt bytes (etcdutl's restore checks it the same way: a file
// whose size is 32 past a multiple of 512 carries one). The verdict is a
// note, not an error: the consistency check already passed, and an SRE with
// nothing else left wants to see the objects either way.
func reportSnapshotHash(db *DB, log io.Writer) {
	ok, present, err := snapshotHashMatches(db.path)
	switch {
	case err != nil:
		fmt.Fprintf(log, "extract: could not verify %s's sha256 trailer: %v\n", db.path, err)
	case !present:
		// a copied member db, or a snapshot whose trailer was stripped
	case ok:
		fmt.Fprintf(log, "extract: %s: sha256 trailer matches its contents\n", db.path)
	default:
		fmt.Fprintf(log, "extract: WARNING: %s: the sha256 trailer does not match its contents: the file changed or was damaged after it was saved; objects read from it may be wrong\n", db.path)
	}
}

func snapshotHashMatches(path string) (ok, present bool, err error) {
	f, err := os.Open(path)
	if err != nil {
		return false, false, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return false, false, err
	}
	size := fi.Size()
	if size%512 != sha256.Size {
		return false, false, nil
	}
	h := sha256.New()
	if _, err := io.CopyN(h, f, size-sha256.Size); err != nil {
		return false, true, err
	}
	want := make([]byte, sha256.Size)
	if _, err := io.ReadFull(f, want); err != nil {
		return false, true, err
	}
	return bytes.Equal(h.Sum(nil), want), true, nil
}
