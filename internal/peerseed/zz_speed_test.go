package peerseed

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestZZStreamSpeed(t *testing.T) {
	ep := os.Getenv("ZZ_EP")
	if ep == "" {
		t.Skip()
	}
	dest := filepath.Join(os.Getenv("ZZ_DIR"), "s.db")
	os.Remove(dest)
	t0 := time.Now()
	s, err := Stream(context.Background(), ep, nil, dest, 0, nil)
	t.Logf("stream %d bytes in %s (%v)", s.Size, time.Since(t0), err)
}
