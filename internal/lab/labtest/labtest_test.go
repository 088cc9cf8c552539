package labtest

import (
	"strings"
	"testing"
)

func TestCheckFreeDiskSaysWhenTheDiskCannotHoldALab(t *testing.T) {
	dir := t.TempDir()
	if err := CheckFreeDisk(dir, 1); err != nil {
		t.Fatalf("1 byte needed: %v", err)
	}
	err := CheckFreeDisk(dir, 1<<62)
	if err == nil || !strings.Contains(err.Error(), "MiB free in "+dir) {
		t.Fatalf("4 EiB needed: want an error naming the free space, got %v", err)
	}
	if err := CheckFreeDisk(dir+"/missing", 1); err == nil {
		t.Fatal("a missing dir: want an error")
	}
}
