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
	q groupcommit.Queue[evalArgs, *redis.Cmd]
}

func newBatcher(rdb redis.UniversalClient) *batcher {
	b := &batcher{UniversalClient: rdb}
	b.q.Run = groupcommit.AloneOrTogether(0, b.evalAlone, b.pipeline)
	return b
}

// evalArgs are one EVALSHA's arguments.
type evalArgs struct {
	sha  string
	keys []string
	args []any
}

// EvalSha queues the command for the next pipeline and waits for its reply.
// A call given up comes back as a command carrying its context's error:
// redis_rate reads the command's error.
func (b *batcher) EvalSha(ctx context.Context, sha string, keys []string, args ...any) *redis.Cmd {
	cmd, err := b.q.Do(ctx, evalArgs{sha: sha, keys: keys, args: args})
	if err != nil {
		cmd = redis.NewCmd(ctx)
		cmd.SetErr(err)
	}
	return cmd
}

// evalAlone sends one call by itself: no pipeline to build.
func (b *batcher) evalAlone(ctx context.Context, a evalArgs) (*redis.Cmd, error) {
	return b.UniversalClient.EvalSha(ctx, a.sha, a.keys, a.args...), nil
}

// pipeline sends calls in one pipeline; each command carries its own error.
func (b *batcher) pipeline(ctx context.Context, calls []*groupcommit.Call[evalArgs, *redis.Cmd]) {
	pipe := b.Pipeline()
	cmds := make([]*redis.Cmd, len(calls))
	for i, c := range calls {
		cmds[i] = pipe.EvalSha(ctx, c.In.sha, c.In.keys, c.In.args...)
	}
	_, _ = pipe.Exec(ctx)
	for i, c := range calls {
		c.Answer(cmds[i], nil)
	}
}
