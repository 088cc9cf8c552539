package localdisk

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

var quarantineTime = time.Date(2025, 3, 4, 5, 6, 7, 890, time.FixedZone("CET", 3600))

func TestQuarantineDataDirMovesARealDataDirIntact(t *testing.T) {
	m := copyOfGolden(t)
	root := filepath.Join(filepath.Dir(m.dataDir), "quarantine")

	dst, err := QuarantineDataDir(m.dataDir, root, quarantineTime)
	if err != nil {
		t.Fatal(err)
	}
	// The stamp is in UTC, whatever zone now was in.
	if want := filepath.Join(root, "data-2025-03-04T04-06-07.000000890Z"); dst != want {
		t.Fatalf("quarantined to %s, want %s", dst, want)
	}
	if _, err := os.Stat(m.dataDir); !os.IsNotExist(err) {
		t.Fatalf("data dir still present after quarantine: %v", err)
	}
	// Still the same, usable member data.
	r := classifyNow(t, dst, Expect{MemberID: m.id.memberID, ClusterID: m.id.clusterID})
	requireClass(t, r, ClassOK)
}

// Issue 38: a data dir replaced by a file is renamed into the quarantine
// as it is, content kept, like a directory.
func TestQuarantineDataDirMovesAFileInPlaceOfTheDataDir(t *testing.T) {
	base := t.TempDir()
	dataDir, root := filepath.Join(base, "etcd"), filepath.Join(base, "quarantine")
	if err := os.WriteFile(dataDir, []byte("not a data dir"), 0o600); err != nil {
		t.Fatal(err)
	}
	dst, err := QuarantineDataDir(dataDir, root, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(dst); err != nil || string(got) != "not a data dir" {
		t.Fatalf("quarantined %s: %q, %v; want the file's content", dst, got, err)
	}
	if _, err := os.Lstat(dataDir); !os.IsNotExist(err) {
		t.Fatalf("data dir path after the quarantine: %v, want it gone (renamed)", err)
	}
}

func TestQuarantineDataDirNeverOverwritesAnEarlierQuarantine(t *testing.T) {
	base := t.TempDir()
	root := filepath.Join(base, "quarantine")
	first := makeDir(t, filepath.Join(base, "one", "data"), "first")
	second := makeDir(t, filepath.Join(base, "two", "data"), "second")

	dst, err := QuarantineDataDir(first, root, quarantineTime)
	if err != nil {
		t.Fatal(err)
	}
	// Same basename, same instant: the target name collides.
	if _, err := QuarantineDataDir(second, root, quarantineTime); err == nil || !strings.Contains(err.Error(), "already exists") {
		t.Fatalf("second quarantine at the same instant: err = %v, want 'already exists'", err)
	}
	requireMarker(t, dst, "first")
	requireMarker(t, second, "second")
}

func TestQuarantineDataDirRefusesAnotherFilesystem(t *testing.T) {
	dataDir := makeDir(t, filepath.Join(t.TempDir(), "data"), "x")
	// /proc always exists on Linux and is never the filesystem of a temp dir.
	const otherFS = "/proc"
	if sameDevice(t, dataDir, otherFS) {
		t.Fatalf("precondition: %s and %s share a device", dataDir, otherFS)
	}

	_, err := QuarantineDataDir(dataDir, otherFS, quarantineTime)
	if err == nil || !strings.Contains(err.Error(), "same filesystem") {
		t.Fatalf("err = %v, want a refusal naming the filesystem", err)
	}
	requireMarker(t, dataDir, "x")
}

func TestQuarantineDataDirRefusesRootInsideDataDir(t *testing.T) {
	dataDir := makeDir(t, filepath.Join(t.TempDir(), "data"), "x")
	_, err := QuarantineDataDir(dataDir, filepath.Join(dataDir, "quarantine"), quarantineTime)
	if err == nil || !strings.Contains(err.Error(), "inside data dir") {
		t.Fatalf("err = %v, want refusal", err)
	}
	requireMarker(t, dataDir, "x")
}

func TestQuarantineOverflowListsOldestBeyondKeepWithoutDeleting(t *testing.T) {
	base := t.TempDir()
	root := filepath.Join(base, "quarantine")
	var moved []string // oldest first
	for i := range 4 {
		dir := makeDir(t, filepath.Join(base, "src", "data"), "x")
		dst, err := QuarantineDataDir(dir, root, quarantineTime.Add(time.Duration(i)*time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		moved = append(moved, dst)
	}
	// Not ours: must be ignored.
	if err := os.WriteFile(filepath.Join(root, "README"), nil, 0o600); err != nil {
		t.Fatal(err)
	}

	got, err := QuarantineOverflow(root, 2)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{moved[1], moved[0]}; !slices.Equal(got, want) {
		t.Fatalf("overflow = %v, want %v", got, want)
	}
	for _, dir := range moved {
		requireMarker(t, dir, "x")
	}

	if got, err := QuarantineOverflow(root, 10); err != nil || got != nil {
		t.Fatalf("keep above count: got %v, %v; want nothing", got, err)
	}
	if got, err := QuarantineOverflow(filepath.Join(base, "absent"), 0); err != nil || got != nil {
		t.Fatalf("missing root: got %v, %v; want nothing", got, err)
	}
}

func TestFreeBytesReportsAvailableSpace(t *testing.T) {
	free, err := FreeBytes(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	var st syscall.Statfs_t
	if err := syscall.Statfs(t.TempDir(), &st); err != nil {
		t.Fatal(err)
	}
	if total := st.Blocks * uint64(st.Bsize); free == 0 || free > total {
		t.Fatalf("free bytes %d not within (0, %d]", free, total)
	}
	if _, err := FreeBytes(filepath.Join(t.TempDir(), "absent")); err == nil {
		t.Fatal("FreeBytes of a missing path succeeded")
	}
}

// makeDir creates dir holding a marker file with the given content.
func makeDir(t testing.TB, dir, marker string) string {
	t.Helper()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "marker"), []byte(marker), 0o600); err != nil {
		t.Fatal(err)
	}
	return dir
}

func requireMarker(t testing.TB, dir, want string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "marker"))
	if err != nil || string(b) != want {
		t.Fatalf("marker in %s = %q, %v; want %q", dir, b, err, want)
	}
}

func sameDevice(t testing.TB, a, b string) bool {
	t.Helper()
	ia, err := os.Stat(a)
	if err != nil {
		t.Fatal(err)
	}
	ib, err := os.Stat(b)
	if err != nil {
		t.Fatal(err)
	}
	return deviceOf(ia) == deviceOf(ib)
}
