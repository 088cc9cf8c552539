package extract

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"
)

// The consistency check runs in a child process: bbolt's tx.Check walks the
// db in a goroutine of its own (and, on etcd's NoFreelistSync dbs, rebuilds
// the freelist in yet another one), and panics there on some kinds of damage.
// No recover reaches those goroutines, so in-process a corrupt db would kill
// the command with a stack trace. In a child, a crash is just the verdict.
//
// The child is this same binary, started with checkRequestEnv set. The hook
// is an init (not a call in main) so that every binary importing the package,
// test binaries included, serves it before doing anything else: a binary that
// did not would run its whole self again (a test binary: all its tests).
// It is inert without the variable, whose name does not start with ETCD_ or
// ETCD_AGENT_ (read as flags by etcd and by etcd-agent's env binding).
const checkRequestEnv = "EXTRACT_DB_CHECK_PATH"

// lockTimeout bounds the wait for bbolt's shared flock on a file we open.
// The copy is ours and a snapshot file belongs to no etcd, so a lock held
// by someone else is worth a clear error, not a long wait.
const lockTimeout = 2 * time.Second

func init() {
	if path, ok := os.LookupEnv(checkRequestEnv); ok {
		os.Exit(serveCheck(path))
	}
}

// checkVerdict is the child's answer on stdout, as one JSON line.
type checkVerdict struct {
	Problem string `json:",omitempty"`
}

// serveCheck is the child's whole life: check, print the verdict, exit 0.
// Only a crash (or an unusable request) exits non-zero.
func serveCheck(path string) int {
	v := checkVerdict{}
	if err := checkDBFile(path); err != nil {
		v.Problem = err.Error()
	}
	if err := json.NewEncoder(os.Stdout).Encode(v); err != nil {
		return 3
	}
	return 0
}

// checkDBFile opens path read-only and runs bbolt's consistency check. It
// may panic (that is why it runs in the child).
func checkDBFile(path string) error {
	db, err := openBolt(path)
	if err != nil {
		return err
	}
	defer db.Close()
	tx, err := db.Begin(false)
	if err != nil {
		return fmt.Errorf("begin read tx: %w", err)
	}
	defer tx.Rollback()
	if err := checkFileHoldsAllPages(path, tx); err != nil {
		return err
	}
	var first error
	problems := 0
	for e := range tx.Check() { // drain: Check's goroutine blocks until read
		if first == nil {
			first = e
		}
		problems++
	}
	if first != nil {
		return fmt.Errorf("bbolt consistency check found %d problem(s), first: %w", problems, first)
	}
	return nil
}

// checkFileHoldsAllPages catches a truncated file before anything touches
// its missing pages: bbolt maps the file and reading a page past its end is
// a SIGBUS, which not even a child can turn into a readable reason.
func checkFileHoldsAllPages(path string, tx *bolt.Tx) error {
	fi, err := os.Stat(path)
	if err != nil {
		return err
	}
	if fi.Size() < tx.Size() {
		return fmt.Errorf("truncated: the db's pages need %d bytes but the file has %d", tx.Size(), fi.Size())
	}
	return nil
}

// openBolt opens path with bbolt read-only (O_RDONLY, shared flock) and a
// short lock timeout. Use it only on files no etcd may be running on.
func openBolt(path string) (*bolt.DB, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if fi.Size() == 0 {
		return nil, errors.New("empty file (0 bytes)") // bbolt would try to initialise it
	}
	db, err := bolt.Open(path, 0o400, &bolt.Options{ReadOnly: true, Timeout: lockTimeout})
	if errors.Is(err, berrors.ErrTimeout) {
		return nil, fmt.Errorf("locked by another process for more than %s (is an etcd running on this file? use --data-dir for a live member)", lockTimeout)
	}
	return db, err
}

// checkInChild runs checkDBFile on path in a child process. It returns the
// problem found (nil: consistent), turning a crash of the child into one.
func checkInChild(ctx context.Context, path string) error {
	exe, err := selfExecutable()
	if err != nil {
		return fmt.Errorf("cannot run the consistency check: %w", err)
	}
	cmd := exec.CommandContext(ctx, exe)
	// The init hook takes over before any argument is read; -test.run=^$
	// is a second guard should a test binary somehow lack it.
	cmd.Args = []string{"etcd-agent-extract-check", "-test.run=^$"}
	// Later duplicates win in os/exec; GOTRACEBACK=none keeps a crash to
	// its one-line reason.
	cmd.Env = append(os.Environ(), checkRequestEnv+"="+path, "GOTRACEBACK=none")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.WaitDelay = time.Second
	runErr := cmd.Run()
	if err := ctx.Err(); err != nil {
		return err
	}
	if runErr == nil {
		var v checkVerdict
		if err := json.Unmarshal(lastLine(stdout.Bytes()), &v); err != nil {
			return fmt.Errorf("the consistency check process sent no verdict: %v", err)
		}
		if v.Problem != "" {
			return errors.New(v.Problem)
		}
		return nil
	}
	if crash := crashReason(stderr.Bytes()); crash != "" {
		return fmt.Errorf("bbolt crashed reading it: %s", crash)
	}
	return fmt.Errorf("the consistency check process failed: %v: %s", runErr, bytes.TrimSpace(stderr.Bytes()))
}

// selfExecutable prefers /proc/self/exe, which still works after the binary
// on disk has been replaced.
func selfExecutable() (string, error) {
	const procSelf = "/proc/self/exe"
	if _, err := os.Stat(procSelf); err == nil {
		return procSelf, nil
	}
	return os.Executable()
}

// crashReason finds the runtime's one-line reason in a crashed child's
// stderr (a Go panic or a fatal fault), or "".
func crashReason(b []byte) string {
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "panic: ") || strings.HasPrefix(line, "fatal error: ") ||
			strings.HasPrefix(line, "unexpected fault address") {
			return line
		}
	}
	return ""
}

func lastLine(b []byte) []byte {
	b = bytes.TrimRight(b, "\n")
	if i := bytes.LastIndexByte(b, '\n'); i >= 0 {
		return b[i+1:]
	}
	return b
}
