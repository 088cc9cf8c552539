package logging

import "testing"

func TestNewRejectsUnknownLevelAndFormat(t *testing.T) {
	if _, err := New("loud", FormatJSON); err == nil {
		t.Fatal("level \"loud\" was accepted")
	}
	if _, err := New("info", "xml"); err == nil {
		t.Fatal("format \"xml\" was accepted")
	}
	for _, f := range []string{FormatAuto, FormatJSON, FormatConsole} {
		if _, err := New("debug", f); err != nil {
			t.Fatalf("format %s: %v", f, err)
		}
	}
}
