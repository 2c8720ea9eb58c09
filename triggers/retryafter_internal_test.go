package triggers

import (
	"net/http"
	"testing"
	"time"
)

// TestRetryAfter: a receiver's Retry-After in both forms RFC 9110 allows,
// delay-seconds and an HTTP date, becomes the delay before the next
// attempt; it is capped at 24 h (a receiver cannot park a delivery for
// good) and never negative; anything unreadable is no hint (0: the backoff
// applies). server TestTriggersWebhook_RetryAfterHonoured checks the
// seconds form end to end.
func TestRetryAfter(t *testing.T) {
	now := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	date := func(d time.Duration) string { return now.Add(d).Format(http.TimeFormat) }
	for _, c := range []struct {
		header string
		want   time.Duration
	}{
		{"", 0},
		{"1", time.Second},
		{" 120 ", 2 * time.Minute},
		{"0", 0},
		{"-5", 0},
		{"-9223372036854775808", 0},
		{"86400", 24 * time.Hour},
		{"86401", 24 * time.Hour},
		{"999999999", 24 * time.Hour},
		{"99999999999", 24 * time.Hour}, // n × 1 s overflows a Duration
		{"9223372036854775807", 24 * time.Hour},
		{"99999999999999999999", 24 * time.Hour}, // past int64
		{"-99999999999999999999", 0},
		{date(90 * time.Second), 90 * time.Second},
		{date(3 * time.Hour), 3 * time.Hour},
		{date(-time.Hour), 0},
		{date(48 * time.Hour), 24 * time.Hour},
		{now.Add(time.Minute).Format(time.RFC850), time.Minute}, // the obsolete forms http.ParseTime reads
		{now.Add(time.Minute).Format(time.ANSIC), time.Minute},
		{"soon", 0},
		{"1.5", 0},
	} {
		if got := retryAfter(c.header, now); got != c.want {
			t.Errorf("Retry-After %q: delay %v, want %v", c.header, got, c.want)
		}
	}
}
