//go:build !linux

package localdisk

// statxMountRoot: no statx; the device comparison answers.
func statxMountRoot(string) (root, known bool) { return false, false }
