package timefmt

import (
	"testing"
	"time"
)

func TestAtSaysTheTimeAbsoluteAndRelative(t *testing.T) {
	now := time.Date(2026, 12, 6, 12, 40, 4, 0, time.UTC)
	for _, c := range []struct {
		at   time.Time
		want string
	}{
		{now.Add(-41 * time.Second), "2026-12-06T12:39:23Z, 41s ago"},
		{now.Add(-(4*time.Minute + 12*time.Second)), "2026-12-06T12:35:52Z, 4m12s ago"},
		{now.Add(-(3*time.Hour + 5*time.Minute + 20*time.Second)), "2026-12-06T09:34:44Z, 3h5m ago"},
		{now.Add(-(51 * time.Hour)), "2026-12-04T09:40:04Z, 2d3h ago"},
		{now.Add(12 * time.Second), "2026-12-06T12:40:16Z, in 12s"},
		{now.Add(300 * time.Millisecond), "2026-12-06T12:40:04Z, now"},
		{now.In(time.FixedZone("CET", 3600)).Add(-2 * time.Second), "2026-12-06T12:40:02Z, 2s ago"},
		{time.Time{}, ""},
	} {
		if got := At(c.at, now); got != c.want {
			t.Errorf("At(%s) = %q, want %q", c.at, got, c.want)
		}
	}
}
