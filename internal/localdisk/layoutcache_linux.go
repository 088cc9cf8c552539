//go:build linux

package localdisk

import (
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// keyOf stats what a layout verdict rests on; settled: no directory
// changed within layoutSettle of now.
func keyOf(d Dirs, now time.Time) (layoutKey, bool, error) {
	var k layoutKey
	settled := true
	for i, p := range []string{d.Data, filepath.Join(d.Data, memberDirName), d.WALDir(), filepath.Join(d.Data, dbRelPath)} {
		fi, err := os.Stat(p)
		if err != nil {
			return k, false, err
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		if !ok {
			return k, false, os.ErrInvalid
		}
		s := statKey{dev: uint64(st.Dev), ino: st.Ino, mode: fi.Mode()}
		if i < 3 { // a directory: its entries change its mtime and ctime
			s.mtime, s.ctime = st.Mtim.Nano(), st.Ctim.Nano()
			limit := now.Add(-layoutSettle).UnixNano()
			settled = settled && s.mtime < limit && s.ctime < limit
		} else { // the db: written all the time; only what is checked
			s.nonEmpty = fi.Size() > 0
		}
		k[i] = s
	}
	return k, settled, nil
}
