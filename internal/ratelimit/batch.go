package ratelimit

import (
	"context"
	"sync"

	"github.com/redis/go-redis/v9"

	"paysvc/internal/groupcommit"
)

// batcher is the Redis client the limiter runs its GCRA scripts through: the
// EVALSHAs of concurrent checks travel together, as one pipeline in one
// round trip. Different keys decided at once are gathered (gathering);
// checks decided again after leases, and leases' give-backs, queue while
// the previous pipeline is in Redis. Each EVALSHA still runs alone and
// atomically in Redis, in arrival order; only the round trips and their
// system calls are shared.
//
// A caller whose call is queued waits for its own reply or its context,
// whichever comes first; a call that finds the queue idle runs on its
// caller's goroutine, where go-redis, once it has sent a command, waits
// for the reply until its ReadTimeout whatever the context (as for a plain
// command). The limiter's budget on a request is kept by the caller's own
// wait (groupcommit's Wait), and held refusals by timers (afterLeases).
// Every other command (the script's EVAL after NOSCRIPT, DEL of Reset) goes
// straight to the client.
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

// EvalSha queues the command for the next pipeline, or its gathering's
// (gatherIn), and waits for its reply. A call given up comes back as a
// command carrying its context's error: the script's Run reads the command's
// error.
func (b *batcher) EvalSha(ctx context.Context, sha string, keys []string, args ...any) *redis.Cmd {
	a := evalArgs{sha: sha, keys: keys, args: args}
	var cmd *redis.Cmd
	var err error
	if g, ok := ctx.Value(gatheringKey{}).(*gathering); ok {
		cmd, err = g.eval(ctx, b, a)
	} else {
		cmd, err = b.q.Do(ctx, a)
	}
	if err != nil {
		cmd = redis.NewCmd(ctx)
		cmd.SetErr(err)
	}
	return cmd
}

// gathering holds the EVALSHAs of n decisions made at once by goroutines
// of their own (coalesce's keys, each through spend) until the last
// has come, then sends them as one pipeline. Through the queue the first
// would go alone and the others follow as they reach it, in several
// pipelines: one round trip of Redis's for each, where one does for all.
//
// Each of the n goroutines must send exactly one EVALSHA under the
// gathering, as spend's script Run does first (its EVAL after NOSCRIPT
// goes straight to the client): the pipeline leaves when the n-th comes.
type gathering struct {
	ctx   context.Context // the pipeline's: see groupcommit.PatientContext
	n     int
	mu    sync.Mutex
	calls []evalArgs
	cmds  []*redis.Cmd
	done  chan struct{}
}

type gatheringKey struct{}

// gatherIn returns a gathering of n calls, their pipeline sent under
// patient.
func gatherIn(patient context.Context, n int) *gathering {
	return &gathering{ctx: patient, n: n, calls: make([]evalArgs, 0, n), done: make(chan struct{})}
}

// under returns ctx with the gathering: the batcher's EvalSha under it
// joins it.
func (g *gathering) under(ctx context.Context) context.Context {
	return context.WithValue(ctx, gatheringKey{}, g)
}

// eval adds a to the gathering, sends the pipeline when a is the last,
// and waits for a's reply or the end of ctx.
func (g *gathering) eval(ctx context.Context, b *batcher, a evalArgs) (*redis.Cmd, error) {
	g.mu.Lock()
	i := len(g.calls)
	g.calls = append(g.calls, a)
	last := len(g.calls) == g.n
	g.mu.Unlock()
	if last {
		g.cmds = b.send(g.ctx, g.calls)
		close(g.done)
	}
	select {
	case <-g.done:
		return g.cmds[i], nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// evalAlone sends one call by itself: no pipeline to build.
func (b *batcher) evalAlone(ctx context.Context, a evalArgs) (*redis.Cmd, error) {
	return b.UniversalClient.EvalSha(ctx, a.sha, a.keys, a.args...), nil
}

// pipeline answers the queue's calls of a run from one pipeline.
func (b *batcher) pipeline(ctx context.Context, calls []*groupcommit.Call[evalArgs, *redis.Cmd]) {
	in := make([]evalArgs, len(calls))
	for i, c := range calls {
		in[i] = c.In
	}
	for i, cmd := range b.send(ctx, in) {
		calls[i].Answer(cmd, nil)
	}
}

// send sends calls in one pipeline; each command carries its own error.
func (b *batcher) send(ctx context.Context, calls []evalArgs) []*redis.Cmd {
	pipe := b.Pipeline()
	cmds := make([]*redis.Cmd, len(calls))
	for i, c := range calls {
		cmds[i] = pipe.EvalSha(ctx, c.sha, c.keys, c.args...)
	}
	_, _ = pipe.Exec(ctx)
	return cmds
}
