package peerseed

import (
	"os"
	"path/filepath"
	"testing"

	bolt "go.etcd.io/bbolt"
)

func TestVerifyDBRejectsWhatIsNotAnEtcdDB(t *testing.T) {
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty")
	garbage := filepath.Join(dir, "garbage")
	bare := filepath.Join(dir, "bare-bolt")
	noIndex := filepath.Join(dir, "no-index")
	os.WriteFile(empty, nil, 0o600)
	os.WriteFile(garbage, make([]byte, 8192), 0o600)
	makeBolt(t, bare)
	makeBolt(t, noIndex, "key", "meta")

	for _, p := range []string{empty, garbage, bare, noIndex, filepath.Join(dir, "missing")} {
		if ci, term, err := VerifyDB(p); err == nil {
			t.Errorf("VerifyDB(%s) = %d, %d, nil; want an error", filepath.Base(p), ci, term)
		} else {
			t.Logf("%s: %v", filepath.Base(p), err)
		}
	}
	if b, _ := os.ReadFile(empty); len(b) != 0 {
		t.Error("VerifyDB wrote to an empty file")
	}
}

func makeBolt(t *testing.T, path string, buckets ...string) {
	t.Helper()
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.Update(func(tx *bolt.Tx) error {
		for _, b := range buckets {
			if _, err := tx.CreateBucket([]byte(b)); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}
