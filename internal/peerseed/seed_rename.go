package peerseed

import (
	"errors"
	"fmt"
	"os"
)

// renameIfAbsent renames from to to if to does not exist. Between the check
// and the rename another process could create to; only the agent writes
// the data dir while the member is stopped, so this is the fallback where
// RENAME_NOREPLACE is missing.
func renameIfAbsent(from, to string) error {
	if _, err := os.Lstat(to); err == nil {
		return fmt.Errorf("rename %s %s: %w", from, to, os.ErrExist)
	} else if !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return os.Rename(from, to)
}
