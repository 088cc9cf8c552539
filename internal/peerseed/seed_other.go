//go:build !linux

package peerseed

import "os"

func renameNoReplace(from, to string) error { return renameIfAbsent(from, to) }

// startWriteback: only Linux has sync_file_range; the fsync does it all.
func startWriteback(*os.File, int64, int64) {}

// awaitWriteback: only Linux has sync_file_range; the fsync does it all.
func awaitWriteback(*os.File, int64, int64) {}
