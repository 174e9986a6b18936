package ratelimit

import (
	"context"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// batcher is the Redis client redis_rate runs its GCRA script through: the
// EVALSHAs of concurrent requests travel together, as one pipeline in one
// round trip, while the previous pipeline is in Redis (group commit). Each
// EVALSHA still runs alone and atomically in Redis, in arrival order, so the
// limit stays exact per key across replicas; only the round trips and their
// system calls are shared. At low load a pipeline holds one command.
//
// A caller waits for its own reply or its context, whichever comes first:
// the limiter's budget holds as it does for a plain command. Every other
// command (the script's EVAL after NOSCRIPT, DEL of Reset) goes straight
// to the client.
type batcher struct {
	redis.UniversalClient

	mu    sync.Mutex
	queue []*evalCall
	busy  bool // a flusher goroutine is running
}

type evalCall struct {
	ctx  context.Context
	sha  string
	keys []string
	args []any
	cmd  *redis.Cmd
	done chan struct{}
}

// EvalSha queues the command for the next pipeline and waits for its reply.
func (b *batcher) EvalSha(ctx context.Context, sha string, keys []string, args ...any) *redis.Cmd {
	c := &evalCall{ctx: ctx, sha: sha, keys: keys, args: args, done: make(chan struct{})}
	b.mu.Lock()
	b.queue = append(b.queue, c)
	start := !b.busy
	b.busy = true
	b.mu.Unlock()
	if start {
		go b.flush()
	}
	select {
	case <-c.done:
		return c.cmd
	case <-ctx.Done():
		cmd := redis.NewCmd(ctx)
		cmd.SetErr(ctx.Err())
		return cmd
	}
}

// flush sends the queued commands as pipelines until none are left.
func (b *batcher) flush() {
	for {
		b.mu.Lock()
		calls := b.queue
		b.queue = nil
		if len(calls) == 0 {
			b.busy = false
			b.mu.Unlock()
			return
		}
		b.mu.Unlock()
		b.exec(calls)
	}
}

// exec runs calls in one pipeline. Commands whose caller has given up are
// left out. The pipeline may take as long as the most patient caller (the
// latest deadline): none waits for longer than its own budget anyway.
func (b *batcher) exec(calls []*evalCall) {
	live := calls[:0]
	var deadline time.Time
	unbounded := false
	for _, c := range calls {
		if c.ctx.Err() != nil {
			close(c.done)
			continue
		}
		live = append(live, c)
		if d, ok := c.ctx.Deadline(); !ok {
			unbounded = true
		} else if d.After(deadline) {
			deadline = d
		}
	}
	if len(live) == 0 {
		return
	}
	if len(live) == 1 { // no pipeline to build
		c := live[0]
		c.cmd = b.UniversalClient.EvalSha(c.ctx, c.sha, c.keys, c.args...)
		close(c.done)
		return
	}
	ctx := context.WithoutCancel(live[0].ctx)
	if !unbounded {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, deadline)
		defer cancel()
	}
	pipe := b.Pipeline()
	for _, c := range live {
		c.cmd = pipe.EvalSha(ctx, c.sha, c.keys, c.args...)
	}
	_, _ = pipe.Exec(ctx) // each command carries its own error
	for _, c := range live {
		close(c.done)
	}
}
