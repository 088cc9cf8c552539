//go:build !linux

package localdisk

import (
	"errors"
	"time"
)

// keyOf: without Linux's stat fields every poll lists.
func keyOf(Dirs, time.Time) (layoutKey, bool, error) {
	return layoutKey{}, false, errors.ErrUnsupported
}
