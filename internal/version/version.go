// Package version carries the build's version, set with -ldflags at build time.
package version

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// Version is set by `-ldflags "-X github.com/etcd-agent/etcd-agent/internal/version.Version=..."`.
var Version = "dev"

// String is what `etcd-agent version` prints.
func String() string {
	commit := "unknown"
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, s := range info.Settings {
			if s.Key == "vcs.revision" {
				commit = s.Value
			}
		}
	}
	return fmt.Sprintf("etcd-agent %s (commit %s, %s, %s/%s)", Version, commit, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}
