package localdisk

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
	"syscall"
	"time"
)

// The deep inspection runs in a child process: a re-exec of the current
// binary, which must call ServeInspectionIfChild first thing in main (and
// in TestMain of a test binary that classifies data dirs). The reason is
// bbolt: on etcd's NoFreelistSync dbs it rebuilds the freelist by walking
// the tree and panics on damage from a goroutine of its own (seen in the
// wild after power loss, bbolt issue #335), which no recover can catch. A
// crash of the child is therefore a verdict (corrupt), not an outage.
// Cancelling ctx kills the child, which also drops its db lock at once.

// inspectRequestEnv carries the JSON inspectRequest to the child. It must
// not start with ETCD_, which etcd would read as flags.
const inspectRequestEnv = "LOCALDISK_INSPECT_REQUEST"

// stagePrefix marks the child's progress lines on stderr; each carries a
// JSON childStage.
const stagePrefix = "localdisk-stage: "

// childStage is the child's last word before a step that may crash it.
type childStage struct {
	Step    string
	Partial Result
}

// ServeInspectionIfChild makes this process the inspection child when it
// was started as one (runInspection): it inspects, prints the verdict and
// exits. Otherwise it returns at once. It is explicit, not an init, so that
// importing the package never diverts a program: a binary that forgets it
// gets an unverified verdict ("no result from the inspection child"), never
// a second copy of itself running on (the child's arguments make a Go test
// binary run no tests).
func ServeInspectionIfChild() {
	req, ok := os.LookupEnv(inspectRequestEnv)
	if !ok {
		return
	}
	os.Exit(serveInspection(req))
}

// serveInspection is the child's whole life: decode, inspect, print JSON.
func serveInspection(reqJSON string) int {
	var req inspectRequest
	if err := json.Unmarshal([]byte(reqJSON), &req); err != nil {
		fmt.Fprintf(os.Stderr, "localdisk: bad inspection request: %v\n", err)
		return 3
	}
	r := inspect(req, func(step string, partial Result) {
		b, _ := json.Marshal(childStage{Step: step, Partial: partial})
		fmt.Fprintf(os.Stderr, "%s%s\n", stagePrefix, b)
	})
	if err := json.NewEncoder(os.Stdout).Encode(r); err != nil {
		return 3
	}
	return 0
}

// inspectTimeout bounds an inspection child whatever its caller's ctx
// allows (the agent's loop gives none): a child that does not finish (a
// hung read, a deadlock in bbolt) is killed then, and the check is
// unverified. A real check reads the whole db (tx.Check): this is far
// beyond the largest db's read.
var inspectTimeout = 10 * time.Minute

// runInspection runs inspect in a child process. A child that crashes
// yields a corrupt Result; an error means no verdict (ctx ended, the child
// did not finish within inspectTimeout, could not run or was killed from
// outside).
func runInspection(ctx context.Context, req inspectRequest) (Result, error) {
	return runInspectionWith(ctx, req, nil)
}

// runInspectionWith is runInspection with files the child inherits (fd 3
// on), and, when there are any, the child in its own process group (a
// terminal's Ctrl-C does not end it before it cleans up after itself).
func runInspectionWith(ctx context.Context, req inspectRequest, extra []*os.File) (Result, error) {
	reqJSON, err := json.Marshal(req)
	if err != nil {
		return Result{}, err
	}
	parent := ctx
	ctx, cancel := context.WithTimeout(ctx, inspectTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, selfExecutable())
	// -test.run=^$: a test binary that does not serve inspections runs no test.
	cmd.Args = []string{"localdisk-inspect", "-test.run=^$"}
	// Later duplicates win in os/exec; GOTRACEBACK=none keeps a crash to its
	// one-line reason.
	cmd.Env = append(os.Environ(), inspectRequestEnv+"="+string(reqJSON), "GOTRACEBACK=none")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.WaitDelay = time.Second
	if len(extra) > 0 {
		cmd.ExtraFiles = extra
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	}

	runErr := cmd.Run()
	if err := parent.Err(); err != nil {
		return Result{}, err
	}
	if ctx.Err() != nil {
		return Result{}, fmt.Errorf("the inspection process did not finish within %s (killed; last step: %s)",
			inspectTimeout, lastStep(stderr.Bytes()))
	}
	if runErr == nil {
		var r Result
		if err := json.Unmarshal(lastLine(stdout.Bytes()), &r); err != nil {
			return Result{}, fmt.Errorf("inspection process sent no result: %v", err)
		}
		return r, nil
	}
	stage, crash := parseChildStderr(stderr.Bytes())
	if crash != "" {
		r := stage.Partial
		r.Class = ClassCorrupt
		r.Detail = fmt.Sprintf("%s: crashed: %s", stage.Step, crash)
		return r, nil
	}
	var exitErr *exec.ExitError
	if errors.As(runErr, &exitErr) {
		return Result{}, fmt.Errorf("inspection process failed during %q: %v", stage.Step, runErr)
	}
	return Result{}, fmt.Errorf("cannot run inspection process: %v", runErr)
}

// selfExecutable prefers /proc/self/exe, which still works after the
// binary on disk has been replaced (e.g. during an upgrade).
func selfExecutable() string {
	const procSelf = "/proc/self/exe"
	if _, err := os.Stat(procSelf); err == nil {
		return procSelf
	}
	if exe, err := os.Executable(); err == nil {
		return exe
	}
	return os.Args[0]
}

// parseChildStderr returns the last stage the child announced and, if it
// crashed, the runtime's reason line (a Go panic or a fatal fault).
func parseChildStderr(b []byte) (stage childStage, crash string) {
	stage.Step = "inspection"
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, stagePrefix):
			var s childStage
			if json.Unmarshal([]byte(strings.TrimPrefix(line, stagePrefix)), &s) == nil {
				stage = s
			}
		case crash == "" && (strings.HasPrefix(line, "panic: ") ||
			strings.HasPrefix(line, "fatal error: ") ||
			strings.HasPrefix(line, "unexpected fault address")):
			crash = line
		}
	}
	return stage, crash
}

// lastStep is the last step a child announced on stderr.
func lastStep(b []byte) string {
	stage, _ := parseChildStderr(b)
	return stage.Step
}

func lastLine(b []byte) []byte {
	b = bytes.TrimRight(b, "\n")
	if i := bytes.LastIndexByte(b, '\n'); i >= 0 {
		return b[i+1:]
	}
	return b
}
