package dashboard

import (
	"context"
	"strconv"
	"sync"
	"time"

	"golang.org/x/sync/singleflight"

	"paysvc/internal/payments"
)

// volumeTTL is how stale the home page's chart may be. Summing a month of
// a busy merchant's payments reads every one of them (a million rows take
// a good part of a second), so each scope's sum is kept this long and
// computed by one request at a time; balances and the payment lists are
// always read fresh.
const volumeTTL = time.Minute

// maxVolumeEntries bounds the cache's memory; past it, it starts over.
const maxVolumeEntries = 10_000

type volumeCache struct {
	mu      sync.Mutex
	entries map[payments.Scope]volumeEntry
	group   singleflight.Group
}

type volumeEntry struct {
	at   time.Time
	days []payments.DayVolume
}

// dailyVolume returns the scope's last 30 days of volume, at most
// volumeTTL old.
func (d *Dashboard) dailyVolume(ctx context.Context, sc payments.Scope) ([]payments.DayVolume, error) {
	c := &d.volume
	now := time.Now()
	c.mu.Lock()
	e, ok := c.entries[sc]
	c.mu.Unlock()
	if ok && now.Sub(e.at) < volumeTTL {
		return e.days, nil
	}
	v, err, _ := c.group.Do(sc.MerchantID+"/"+strconv.FormatBool(sc.Live), func() (any, error) {
		days, err := d.svc.DailyVolume(ctx, sc, 30)
		if err != nil {
			return nil, err
		}
		c.mu.Lock()
		if c.entries == nil || len(c.entries) >= maxVolumeEntries {
			c.entries = map[payments.Scope]volumeEntry{}
		}
		c.entries[sc] = volumeEntry{at: now, days: days}
		c.mu.Unlock()
		return days, nil
	})
	if err != nil {
		return nil, err
	}
	return v.([]payments.DayVolume), nil
}
