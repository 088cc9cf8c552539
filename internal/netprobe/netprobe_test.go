package netprobe

import (
	"errors"
	"net"
	"path/filepath"
	"testing"
	"time"
)

func TestDialTellsAcceptedRefusedAndUnprobeable(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	open := "http://" + l.Addr().String()
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	shut := "https://" + closed.Addr().String()
	closed.Close()
	defer l.Close()
	for _, c := range []struct {
		url                 string
		accepted, refused   bool
		unprobeable, errAny bool
	}{
		{url: open, accepted: true},
		{url: shut, refused: true},
		{url: "unix://" + filepath.Join(t.TempDir(), "no.sock"), refused: true},
		{url: "http://127.0.0.1", unprobeable: true, errAny: true},
		{url: "ftp://127.0.0.1:21", unprobeable: true, errAny: true},
		{url: "http://[::1", unprobeable: true, errAny: true},
	} {
		a, r, err := Dial(c.url, time.Second)
		if a != c.accepted || r != c.refused || (err != nil) != c.errAny || errors.Is(err, ErrUnprobeable) != c.unprobeable {
			t.Errorf("Dial(%q) = %v, %v, %v; want accepted %v refused %v unprobeable %v", c.url, a, r, err, c.accepted, c.refused, c.unprobeable)
		}
	}
}
