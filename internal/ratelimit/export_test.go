package ratelimit

import "time"

// SetLeaseTimes sets how long l's leases hand out their budget, and how
// long Redis remembers a lease of l's (tests that must see a lease end).
func SetLeaseTimes(l *Limiter, leaseFor, remembered time.Duration) {
	l.leaseFor, l.leasedRemembered = leaseFor, remembered
}
