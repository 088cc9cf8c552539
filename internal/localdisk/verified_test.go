package localdisk

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	bolt "go.etcd.io/bbolt"
)

// A brand-new member bootstrapping creates member/snap/db before
// member/wal: the layout check then says corrupt, but the db is flocked by
// the running etcd. Classify must say in-use, as ClassifyLayout's comment
// promises, and only a dir nobody holds is a confirmed corrupt one.
func TestClassifyReportsInUseForLayoutCorruptDirWhoseDBIsLocked(t *testing.T) {
	m := copyOfGolden(t)
	if err := os.RemoveAll(filepath.Join(m.dataDir, walRelPath)); err != nil {
		t.Fatal(err)
	}
	layout := ClassifyLayout(DataDirOnly(m.dataDir))
	requireClass(t, layout, ClassCorrupt, walRelPath)
	if layout.Verified {
		t.Fatal("the layout check claims a verified verdict")
	}

	// Hold the exclusive flock a running etcd holds on its db.
	db, err := bolt.Open(filepath.Join(m.dataDir, dbRelPath), 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	r := classifyNow(t, m.dataDir, Expect{})
	requireClass(t, r, ClassInUse, dbRelPath)
	if !r.Verified {
		t.Fatal("in-use verdict not marked verified")
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	r = classifyNow(t, m.dataDir, Expect{})
	requireClass(t, r, ClassCorrupt, walRelPath)
	if !r.Verified {
		t.Fatal("corrupt verdict of a dir nobody holds not marked verified")
	}
}

// Verified tells a confirmed verdict from the layout check's guess.
func TestClassifyMarksVerifiedVerdicts(t *testing.T) {
	m := copyOfGolden(t)
	if r := classifyNow(t, m.dataDir, Expect{}); r.Class != ClassOK || !r.Verified {
		t.Fatalf("deep check of a good dir: %s verified=%v (%s)", r.Class, r.Verified, r.Detail)
	}
	if r := ClassifyLayout(DataDirOnly(m.dataDir)); r.Verified {
		t.Fatalf("layout check marked verified: %s", r.Detail)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if r := Classify(ctx, DataDirOnly(m.dataDir), Expect{}); r.Verified {
		t.Fatalf("unfinished deep check marked verified: %s", r.Detail)
	}
	missing := filepath.Join(t.TempDir(), "none")
	if r := classifyNow(t, missing, Expect{}); r.Class != ClassMissing || !r.Verified {
		t.Fatalf("missing dir: %s verified=%v", r.Class, r.Verified)
	}
}
