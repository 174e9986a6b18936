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
// after three commands in a row fail without an answer from Redis it
// opens, and every command fails at once with ErrUnreachable, never
// reaching the network. While it is open a goroutine of its own pings
// Redis every Cooldown, and the first answer closes it: no request waits
// on a probe. An answer from Redis, even an error reply (NOSCRIPT,
// WRONGTYPE), counts as Redis up; a command its caller abandoned counts
// as nothing.
package breaker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sony/gobreaker/v2"
)

// ErrUnreachable is the error of a command the open breaker did not send,
// and wraps that of the command that opened it.
var ErrUnreachable = errors.New("redis does not answer (circuit open)")

// Cooldown is how often the open breaker pings Redis, in the processes
// (tests use shorter ones).
const Cooldown = time.Second

// trip is how many commands in a row must fail to open the breaker: one
// slow answer under load is not an outage.
const trip = 3

// Hook is the breaker, a redis.Hook: add it to a client with AddHook.
type Hook struct {
	cb       *gobreaker.TwoStepCircuitBreaker[struct{}]
	open     atomic.Bool
	cooldown time.Duration
	ping     func(context.Context) error
}

// New returns a breaker that pings with ping (the client's PING, which the
// hook lets through as a probe) every cooldown while it is open, logging
// when Redis stops and starts answering on log.
func New(log *slog.Logger, cooldown time.Duration, ping func(context.Context) error) *Hook {
	h := &Hook{cooldown: cooldown, ping: ping}
	h.cb = gobreaker.NewTwoStepCircuitBreaker[struct{}](gobreaker.Settings{
		Name:        "redis",
		MaxRequests: 1, // the probe
		Timeout:     cooldown,
		ReadyToTrip: func(c gobreaker.Counts) bool { return c.ConsecutiveFailures >= trip },
		IsExcluded:  func(err error) bool { return errors.Is(err, errAbandoned) },
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

// passKey marks a context whose commands the hook lets through unchecked
// and uncounted: the breaker's own ping, and what go-redis sends inside a
// command it was asked for (a new connection's HELLO, with the command's
// context), which is that command's to count.
type passKey struct{}

// probe pings Redis every cooldown until an answer closes the breaker.
// It is the only caller of Allow while the breaker is not closed.
func (h *Hook) probe() {
	wait := h.cooldown
	for {
		time.Sleep(wait)
		done, err := h.cb.Allow() // half-open by now: this is its one request
		if err != nil {
			wait = h.cooldown / 16 // woken a little early
			continue
		}
		wait = h.cooldown
		ctx, cancel := context.WithTimeout(context.WithValue(context.Background(), passKey{}, true), h.cooldown)
		err = h.ping(ctx)
		cancel()
		if errors.Is(err, redis.ErrClosed) {
			done(errAbandoned)
			return // the process is closing its client
		}
		done(outcome(context.Background(), err))
		if h.cb.State() == gobreaker.StateClosed {
			return
		}
	}
}

// allow admits a command while the breaker is closed; done records its
// outcome. Only the probe tries Redis otherwise.
func (h *Hook) allow(ctx context.Context) (inner context.Context, done func(error), ok bool) {
	if ctx.Value(passKey{}) != nil {
		return ctx, func(error) {}, true
	}
	if h.open.Load() {
		return ctx, nil, false
	}
	done, err := h.cb.Allow()
	return context.WithValue(ctx, passKey{}, true), done, err == nil
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
	case errors.Is(ctx.Err(), context.Canceled), errors.Is(err, redis.ErrClosed):
		return errAbandoned
	case errors.As(err, &reply):
		// A reply: Redis is there, unless it says it cannot serve (a
		// replica during a failover, a server loading its data).
		for _, p := range []string{"LOADING", "MASTERDOWN", "READONLY", "CLUSTERDOWN", "TRYAGAIN"} {
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
		err := next(inner, cmd)
		done(outcome(ctx, err))
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
		err := next(inner, cmds)
		done(outcome(ctx, err))
		for _, c := range cmds {
			if e := h.mark(ctx, c.Err()); e != c.Err() {
				c.SetErr(e)
			}
		}
		return h.mark(ctx, err)
	}
}
