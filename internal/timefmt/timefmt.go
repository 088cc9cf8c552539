// Package timefmt writes a time for a person reading a command's output:
// absolute (UTC, RFC 3339, to compare with logs) and relative to now (to
// read at a glance), as "2026-12-06T12:39:23Z, 41s ago" (README, `status`).
// Not for decision details or Events: they are compared and deduplicated by
// their text, which a relative time would change on every look.
package timefmt

import (
	"time"

	"k8s.io/apimachinery/pkg/util/duration"
)

// At is t, absolute and relative to now ("…, 41s ago", "…, in 12s", "…,
// now"; the relative part as kubectl's AGE column writes it); "" for the
// zero time.
func At(t, now time.Time) string {
	if t.IsZero() {
		return ""
	}
	abs := t.UTC().Format(time.RFC3339)
	d := now.Sub(t)
	switch {
	case d >= time.Second:
		return abs + ", " + duration.HumanDuration(d) + " ago"
	case d <= -time.Second:
		return abs + ", in " + duration.HumanDuration(-d)
	}
	return abs + ", now"
}
