package testenv

import (
	"context"
	"sync"
	"sync/atomic"
)

// CallGivenUp makes 20,000 concurrent calls with an ended context and
// returns how many of them came back wrong (call returned false). A
// groupcommit queue answers such calls itself, and their callers may find
// that answer and their context done at once, so the answer must be an
// error too: with this many calls, some callers see both.
func CallGivenUp(call func(ctx context.Context) (ok bool)) int64 {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var wg sync.WaitGroup
	var wrong atomic.Int64
	for range 20000 {
		wg.Go(func() {
			if !call(ctx) {
				wrong.Add(1)
			}
		})
	}
	wg.Wait()
	return wrong.Load()
}
