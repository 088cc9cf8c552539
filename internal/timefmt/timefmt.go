// Package timefmt writes a time for a person reading a command's output:
// absolute (UTC, RFC 3339, to compare with logs) and relative to now (to
// read at a glance), as "2026-12-06T12:39:23Z, 41s ago" (README, `status`).
// Not for decision details or Events: they are compared and deduplicated by
// their text, which a relative time would change on every look.
package timefmt

import (
	"fmt"
	"time"
)

// At is t, absolute and relative to now ("…, 41s ago", "…, in 12s", "…,
// now"); "" for the zero time.
func At(t, now time.Time) string {
	if t.IsZero() {
		return ""
	}
	abs := t.UTC().Format(time.RFC3339)
	d := now.Sub(t)
	switch {
	case d >= time.Second:
		return abs + ", " + Duration(d) + " ago"
	case d <= -time.Second:
		return abs + ", in " + Duration(-d)
	}
	return abs + ", now"
}

// Duration is d for a person: whole seconds under a minute ("41s"),
// minutes and seconds under an hour ("4m12s"), hours and minutes under a
// day ("3h05m"), then days and hours ("2d03h").
func Duration(d time.Duration) string {
	d = d.Round(time.Second)
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
	case d < 24*time.Hour:
		return fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
	}
	return fmt.Sprintf("%dd%02dh", int(d.Hours())/24, int(d.Hours())%24)
}
