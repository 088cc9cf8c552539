//go:build !linux

package peerseed

func renameNoReplace(from, to string) error { return renameIfAbsent(from, to) }
