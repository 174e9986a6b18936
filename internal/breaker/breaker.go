// Package breaker makes the API's Redis commands fail at once while Redis
// does not answer, instead of each waiting out its budget.
//
// The API serves without Redis, degraded (README, "Operating it"): it
// admits requests unlimited, and work a request commits waits in
// PostgreSQL for the relay. But each Redis command of a request still
// waited for its answer until its budget ran out (the rate limiter's 150
// ms, the after-commit enqueue's 300 ms; go-redis retries a refused
// connection until then), so an outage added that much to every request,
// and the limiter's one call in flight at a time held the others queued
// behind it: 32 connections of GETs went from about 14,000 a second to 220.
//
// The breaker is a go-redis hook on the API's client (sony/gobreaker):
// once three commands in a row have failed without an answer from Redis,
// and Redis has answered none for 300 ms, it opens, and every command
// fails at once with ErrUnreachable, never reaching the network. While it
// is open a goroutine of its own pings Redis every Cooldown, and the first
// answer closes it: no request waits on a probe. An answer from Redis, even
// an error reply (NOSCRIPT, WRONGTYPE), counts as Redis up; a command its
// caller abandoned, and one whose budget had run out before it started,
// count as nothing.
package breaker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sony/gobreaker/v2"
)

// ErrUnreachable is the error of a command the open breaker did not send,
// and wraps that of the command that opened it.
var ErrUnreachable = errors.New("redis does not answer (circuit open)")

// Refused says whether err is the breaker's: a command it did not send or
// the one that opened it, which its one warning already told. Callers that
// log what they could not do without Redis log these at debug level. The
// text is matched too: Asynq's scripts keep only an error's text.
func Refused(err error) bool {
	return err != nil && strings.Contains(err.Error(), ErrUnreachable.Error())
}

// Cooldown is how often the open breaker pings Redis, in the processes
// (tests use shorter ones).
const Cooldown = time.Second

// The breaker opens when trip commands in a row have failed and Redis
// has answered none for quiet: a few slow answers under load, or a short
// stall of Redis, are not an outage.
const (
	trip  = 3
	quiet = 300 * time.Millisecond
)

// Hook is the breaker, a redis.Hook: add it to a client with AddHook.
type Hook struct {
	cb       *gobreaker.TwoStepCircuitBreaker[struct{}]
	open     atomic.Bool
	closed   atomic.Bool   // the client is closing: commands go to go-redis, which says so
	stop     chan struct{} // closed by Close: the probe ends
	stopOnce sync.Once
	answered atomic.Int64 // when Redis last answered a command, Unix ns
	cooldown time.Duration
	ping     func(context.Context) error
}

// New returns a breaker that pings with ping (the client's PING, which the
// hook lets through as a probe) every cooldown while it is open, logging
// when Redis stops and starts answering on log.
func New(log *slog.Logger, cooldown time.Duration, ping func(context.Context) error) *Hook {
	h := &Hook{cooldown: cooldown, ping: ping, stop: make(chan struct{})}
	h.cb = gobreaker.NewTwoStepCircuitBreaker[struct{}](gobreaker.Settings{
		Name:        "redis",
		MaxRequests: 1, // the probe
		Timeout:     cooldown,
		ReadyToTrip: func(c gobreaker.Counts) bool {
			return c.ConsecutiveFailures >= trip && time.Since(time.Unix(0, h.answered.Load())) >= quiet
		},
		IsExcluded: func(err error) bool { return errors.Is(err, errAbandoned) },
		OnStateChange: func(_ string, from, to gobreaker.State) {
			h.open.Store(to != gobreaker.StateClosed)
			switch {
			case from == gobreaker.StateClosed && to == gobreaker.StateOpen:
				log.Warn("redis does not answer: its commands fail at once until a ping gets an answer",
					"ping_every", cooldown.String())
				go h.probe()
			case to == gobreaker.StateClosed:
				log.Info("redis answers again")
			}
		},
	})
	return h
}

// Contexts whose commands the hook lets through unchecked: the breaker's
// own ping (probeKey), whose answer it records itself, and what go-redis
// sends inside a command it was asked for (innerKey: a new connection's
// HELLO, with the command's context), which is that command's to count.
type (
	probeKey struct{}
	innerKey struct{}
)

// passes says whether ctx is one of those.
func passes(ctx context.Context) bool {
	return ctx.Value(innerKey{}) != nil || ctx.Value(probeKey{}) != nil
}

// probe pings Redis every cooldown until an answer closes the breaker
// (with one probe request allowed, an answer while half-open closes it), or
// the client closes. Besides a request that stalled for a whole cooldown
// between allow's two reads, it is the only caller of Allow while the
// breaker is not closed.
func (h *Hook) probe() {
	wait := h.cooldown
	for {
		select {
		case <-h.stop:
			return
		case <-time.After(wait):
		}
		done, err := h.cb.Allow() // half-open by now: this is its one request
		if err != nil {
			wait = h.cooldown / 16 // woken a little early
			continue
		}
		wait = h.cooldown
		ctx, cancel := context.WithTimeout(context.WithValue(context.Background(), probeKey{}, true), h.cooldown)
		err = h.ping(ctx)
		cancel()
		o := outcome(context.Background(), err)
		h.record(o)
		done(o)
		if o == nil || errors.Is(err, redis.ErrClosed) {
			return
		}
	}
}

// allow admits a command while the breaker is closed; done records its
// outcome. Only the probe tries Redis otherwise. A command whose context
// has already ended says nothing about Redis: it goes to go-redis, which
// fails it, uncounted.
func (h *Hook) allow(ctx context.Context) (inner context.Context, done func(error), ok bool) {
	if passes(ctx) || h.closed.Load() || ctx.Err() != nil {
		return ctx, func(error) {}, true
	}
	if h.open.Load() {
		return ctx, nil, false
	}
	done, err := h.cb.Allow()
	return context.WithValue(ctx, innerKey{}, true), done, err == nil
}

// record notes an answer from Redis, for ReadyToTrip's quiet.
func (h *Hook) record(o error) {
	if o == nil {
		h.answered.Store(time.Now().UnixNano())
	}
}

// Close makes the hook pass every command to go-redis, which fails them
// with redis.ErrClosed once the client is closed, and ends the probe: call
// it with the client's Close, so that what loops on Redis until the client
// closes (the eviction check) sees it.
func (h *Hook) Close() {
	h.closed.Store(true)
	h.stopOnce.Do(func() { close(h.stop) })
}

// run runs a command (or a pipeline) admitted by allow and records what
// Redis made of it, also when it panics. Only the commands asked for
// count as answers (the probe records its ping's itself): a new
// connection's HELLO inside one is answered even where the command it
// opened for is not (a replica's READONLY).
func (h *Hook) run(ctx context.Context, done func(error), send func() error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			done(errNoAnswer)
			panic(r)
		}
	}()
	err = send()
	o := outcome(ctx, err)
	if !passes(ctx) {
		h.record(o)
	}
	done(o)
	return err
}

// Open reports whether commands are failing at once.
func (h *Hook) Open() bool { return h.open.Load() }

// outcomes passed to the breaker
var (
	errNoAnswer  = errors.New("no answer from redis")
	errAbandoned = errors.New("abandoned by its caller")
)

// outcome classifies a command's error for the breaker: nil when Redis
// answered, errAbandoned when the caller gave up first, errNoAnswer when
// Redis did not answer (or answered that it cannot serve).
func outcome(ctx context.Context, err error) error {
	var reply redis.Error
	switch {
	case err == nil, errors.Is(err, redis.Nil):
		return nil
	case errors.Is(ctx.Err(), context.Canceled), errors.Is(err, redis.ErrClosed), errors.Is(err, redis.ErrPoolTimeout):
		// The caller gave up, the client is closing, or the pool's own
		// timeout ended a wait for a connection: none of it is Redis's
		// doing. (A wait for a busy connection that outlasts the
		// caller's budget ends in its deadline and counts; the quiet
		// keeps the breaker closed while Redis answers the others.)
		return errAbandoned
	case errors.As(err, &reply):
		// A reply: Redis is there, unless it says it cannot serve (a
		// replica during a failover, a server loading its data).
		for _, p := range []string{"LOADING", "MASTERDOWN", "READONLY", "CLUSTERDOWN", "TRYAGAIN", "BUSY "} {
			if strings.HasPrefix(reply.Error(), p) {
				return errNoAnswer
			}
		}
		return nil
	}
	return errNoAnswer // refused, reset, timed out, the caller's budget spent
}

// DialHook leaves dialing alone: a command the breaker stops never dials.
func (h *Hook) DialHook(next redis.DialHook) redis.DialHook { return next }

// ProcessHook runs a command through the breaker.
func (h *Hook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		inner, done, ok := h.allow(ctx)
		if !ok {
			cmd.SetErr(ErrUnreachable)
			return ErrUnreachable
		}
		err := h.run(ctx, done, func() error { return next(inner, cmd) })
		if err = h.mark(ctx, err); err != nil {
			cmd.SetErr(err)
		}
		return err
	}
}

// mark wraps ErrUnreachable around the error of a command Redis did not
// answer once the breaker is open (the one that tripped it), so that
// callers, which log what they cannot do without Redis,
// let the breaker's one line say it.
func (h *Hook) mark(ctx context.Context, err error) error {
	if err == nil || !h.Open() || outcome(ctx, err) != errNoAnswer {
		return err
	}
	return fmt.Errorf("%w: %w", ErrUnreachable, err)
}

// ProcessPipelineHook runs a pipeline (or MULTI) through the breaker, as
// one command: its error is its first command's.
func (h *Hook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		inner, done, ok := h.allow(ctx)
		if !ok {
			for _, c := range cmds {
				c.SetErr(ErrUnreachable)
			}
			return ErrUnreachable
		}
		err := h.run(ctx, done, func() error { return next(inner, cmds) })
		for _, c := range cmds {
			if e := h.mark(ctx, c.Err()); e != c.Err() {
				c.SetErr(e)
			}
		}
		return h.mark(ctx, err)
	}
}
