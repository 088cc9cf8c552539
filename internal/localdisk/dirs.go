package localdisk

import "path/filepath"

// Dirs locates a member's state on the node: its data dir and, when etcd
// runs with a dedicated --wal-dir (ETCD_WAL_DIR), that WAL dir. etcd then
// keeps the WAL there and only member/snap in the data dir; a member/wal
// left in the data dir is ignored, as etcd ignores it (its
// ServerConfig.WALDir). Both are host paths.
type Dirs struct {
	Data string
	// WAL is the dedicated WAL dir; "" when the WAL is in Data's member/wal.
	WAL string
}

// DataDirOnly is the layout etcd uses without --wal-dir.
func DataDirOnly(dataDir string) Dirs { return Dirs{Data: dataDir} }

// WALDir is where etcd reads and writes the member's WAL.
func (d Dirs) WALDir() string {
	if d.WAL != "" {
		return d.WAL
	}
	return filepath.Join(d.Data, walRelPath)
}

// DedicatedWAL: the WAL lives outside the data dir.
func (d Dirs) DedicatedWAL() bool { return d.WAL != "" }

// DBPath is the member's bbolt db.
func (d Dirs) DBPath() string { return filepath.Join(d.Data, dbRelPath) }
