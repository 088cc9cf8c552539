package membersource

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"k8s.io/apimachinery/pkg/types"
)

// NodeFile is a file of a pod's volume, on the node: Root is the volume's
// folder, Rel the file's path inside it. A pod writes its own volumes (a
// claim's PV), and the agent's mount namespace holds every pod's volumes,
// so the file is read inside Root only: a link the pod made to another
// pod's Secret is refused, and an atomic writer's ..data link (inside the
// volume) is followed.
type NodeFile struct {
	Root, Rel string
}

// Path is the file's node path ("" for none), for messages.
func (f NodeFile) Path() string {
	if f.Root == "" {
		return ""
	}
	return filepath.Join(f.Root, f.Rel)
}

// IsZero: no file.
func (f NodeFile) IsZero() bool { return f == NodeFile{} }

// maxNodeFile bounds a read: a cert, key or CA bundle is a few KiB, and a
// pod controls its own files.
const maxNodeFile = 1 << 20

// ReadFile reads the file, resolving nothing outside Root. Opened
// non-blocking, and only a regular file is read: a FIFO the pod made
// would hang the reader.
func (f NodeFile) ReadFile() ([]byte, error) {
	if f.Root == "" {
		return nil, errors.New("no file")
	}
	root, err := os.OpenRoot(f.Root)
	if err != nil {
		return nil, err
	}
	defer root.Close()
	fh, err := root.OpenFile(f.Rel, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer fh.Close()
	st, err := fh.Stat()
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file (%s)", f.Path(), st.Mode().Type())
	}
	b, err := io.ReadAll(io.LimitReader(fh, maxNodeFile+1))
	if err == nil && len(b) > maxNodeFile {
		err = fmt.Errorf("%s is larger than %d bytes", f.Path(), maxNodeFile)
	}
	return b, err
}

// withoutUID is f with a per-pod volume's pod UID masked: the same file
// of the pod's next incarnation.
func (f NodeFile) withoutUID(uid types.UID) NodeFile {
	if uid != "" {
		f.Root = strings.ReplaceAll(f.Root, "/"+string(uid)+"/", "/<pod>/")
	}
	return f
}

// ClientTLS are a client cert, its key, and the CA bundle that verifies
// etcd's serving certs, each in its volume on the node. A file in a
// Secret, ConfigMap or projected volume is where the kubelet writes it,
// under the pod's UID: it moves when the pod is re-created.
type ClientTLS struct {
	CACert, Cert, Key NodeFile
}

// IsZero: the gate has none of the three.
func (t ClientTLS) IsZero() bool { return t == ClientTLS{} }

// SameFiles: a and b (of pods with UIDs ua and ub) name the same files,
// but for the pod's UID in a per-pod volume's path (a re-created pod's
// Secret; the agent follows it without restarting the member's loop).
func SameFiles(a ClientTLS, ua types.UID, b ClientTLS, ub types.UID) bool {
	return a.CACert.withoutUID(ua) == b.CACert.withoutUID(ub) && a.Cert.withoutUID(ua) == b.Cert.withoutUID(ub) &&
		a.Key.withoutUID(ua) == b.Key.withoutUID(ub)
}
