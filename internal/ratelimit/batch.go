package ratelimit

import (
	"context"

	"github.com/redis/go-redis/v9"

	"paysvc/internal/groupcommit"
)

// batcher is the Redis client redis_rate runs its GCRA script through: the
// EVALSHAs of concurrent checks (of different keys, or the one-by-one checks
// of a key near its limit) travel together, as one pipeline in one round
// trip, while the previous pipeline is in Redis. Each EVALSHA still runs
// alone and atomically in Redis, in arrival order; only the round trips and
// their system calls are shared.
//
// A caller waits for its own reply or its context, whichever comes first:
// the limiter's budget holds as it does for a plain command. Every other
// command (the script's EVAL after NOSCRIPT, DEL of Reset) goes straight
// to the client.
type batcher struct {
	redis.UniversalClient
	q groupcommit.Queue[*evalCall]
}

func newBatcher(rdb redis.UniversalClient) *batcher {
	b := &batcher{UniversalClient: rdb}
	b.q.Run = b.exec
	return b
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
	b.q.Add(c)
	select {
	case <-c.done:
		return c.cmd
	case <-ctx.Done():
		cmd := redis.NewCmd(ctx)
		cmd.SetErr(ctx.Err())
		return cmd
	}
}

func (c *evalCall) CallerCtx() context.Context { return c.ctx }

func (c *evalCall) GiveUp(err error) {
	c.cmd = redis.NewCmd(c.ctx)
	c.cmd.SetErr(err)
	close(c.done)
}

// exec runs calls in one pipeline, which may take as long as the most
// patient caller.
func (b *batcher) exec(calls []*evalCall) {
	if len(calls) == 1 { // no pipeline to build
		c := calls[0]
		c.cmd = b.UniversalClient.EvalSha(c.ctx, c.sha, c.keys, c.args...)
		close(c.done)
		return
	}
	ctx, cancel := groupcommit.PatientContext(calls)
	defer cancel()
	pipe := b.Pipeline()
	for _, c := range calls {
		c.cmd = pipe.EvalSha(ctx, c.sha, c.keys, c.args...)
	}
	_, _ = pipe.Exec(ctx) // each command carries its own error
	for _, c := range calls {
		close(c.done)
	}
}
