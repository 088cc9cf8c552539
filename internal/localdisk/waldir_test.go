package localdisk

import (
	"os"
	"path/filepath"
	"testing"
)

// withDedicatedWAL moves a copy of the golden member's member/wal to a
// dedicated WAL dir, as a person does when they add --wal-dir to a member
// (member stopped, member/wal moved, flag added): the layout real clusters
// run with the WAL on a disk of its own.
func withDedicatedWAL(t *testing.T) (stoppedMember, Dirs) {
	t.Helper()
	m := copyOfGolden(t)
	walDir := filepath.Join(t.TempDir(), "wal-disk", "etcd-wal")
	if err := os.MkdirAll(filepath.Dir(walDir), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(m.dataDir, walRelPath), walDir); err != nil {
		t.Fatal(err)
	}
	return m, Dirs{Data: m.dataDir, WAL: walDir}
}

// Issue 38: a healthy member run with --wal-dir was judged corrupt
// ("member/wal is missing while the member dir exists") and replaced.
func TestAMemberWithADedicatedWALDirIsOK(t *testing.T) {
	m, d := withDedicatedWAL(t)
	requireClass(t, ClassifyLayout(d), ClassOK)
	r := classifyNow(t, m.dataDir, Expect{MemberID: m.id.memberID, ClusterID: m.id.clusterID})
	t.Logf("without the WAL dir: %s: %s", r.Class, r.Detail)
	r = classifyDirsNow(t, d, Expect{MemberID: m.id.memberID, ClusterID: m.id.clusterID})
	requireClass(t, r, ClassOK)
	if r.MemberID != m.id.memberID || r.ClusterID != m.id.clusterID || r.WALIndex == 0 {
		t.Fatalf("read member %x cluster %x WAL index %d from the dedicated WAL dir, want member %x cluster %x and an index",
			r.MemberID, r.ClusterID, r.WALIndex, m.id.memberID, m.id.clusterID)
	}
}

// etcd reads only the dedicated WAL dir (ServerConfig.WALDir): a member/wal
// left behind in the data dir is not the member's WAL.
func TestAMemberWALLeftInTheDataDirIsIgnoredWithADedicatedWALDir(t *testing.T) {
	m, d := withDedicatedWAL(t)
	if err := os.MkdirAll(filepath.Join(m.dataDir, walRelPath), 0o700); err != nil {
		t.Fatal(err)
	}
	requireClass(t, classifyDirsNow(t, d, Expect{}), ClassOK)
	empty := Dirs{Data: m.dataDir, WAL: filepath.Join(t.TempDir(), "new-wal")}
	requireClass(t, classifyDirsNow(t, empty, Expect{}), ClassCorrupt, empty.WAL)
}

func TestAWipedMemberWithADedicatedWALDirIsClassedByBothDirs(t *testing.T) {
	cases := map[string]struct {
		damage  func(d Dirs) error
		want    Class
		mention string
	}{
		"both wiped": {
			damage: func(d Dirs) error { return removeAll(d.Data, d.WAL) },
			want:   ClassMissing,
		},
		"data dir wiped, WAL dir emptied": {
			damage: func(d Dirs) error {
				if err := removeAll(d.Data, d.WAL); err != nil {
					return err
				}
				return os.Mkdir(d.WAL, 0o700)
			},
			want: ClassMissing,
		},
		"data dir emptied, WAL dir wiped": {
			damage: func(d Dirs) error {
				if err := removeAll(d.Data, d.WAL); err != nil {
					return err
				}
				return os.Mkdir(d.Data, 0o700)
			},
			want: ClassEmpty,
		},
		// The WAL alone is the member's state, half gone: never "empty",
		// which a new member would start in.
		"data dir wiped, WAL kept": {
			damage:  func(d Dirs) error { return os.RemoveAll(d.Data) },
			want:    ClassCorrupt,
			mention: ".wal",
		},
		"data dir emptied, WAL kept": {
			damage: func(d Dirs) error {
				if err := os.RemoveAll(d.Data); err != nil {
					return err
				}
				return os.Mkdir(d.Data, 0o700)
			},
			want:    ClassCorrupt,
			mention: ".wal",
		},
		"WAL dir wiped, data kept": {
			damage:  func(d Dirs) error { return os.RemoveAll(d.WAL) },
			want:    ClassCorrupt,
			mention: "is missing",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			_, d := withDedicatedWAL(t)
			if err := tc.damage(d); err != nil {
				t.Fatal(err)
			}
			requireClass(t, ClassifyLayout(d), tc.want, tc.mention)
			requireClass(t, classifyDirsNow(t, d, Expect{}), tc.want, tc.mention)
		})
	}
}

func removeAll(paths ...string) error {
	for _, p := range paths {
		if err := os.RemoveAll(p); err != nil {
			return err
		}
	}
	return nil
}
