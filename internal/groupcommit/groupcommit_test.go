package groupcommit_test

import (
	"context"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"paysvc/internal/groupcommit"
)

// held is a Run whose runs of a held input block until release is closed,
// and which records every run's size in order.
type held struct {
	hold    int
	release chan struct{}
	mu      sync.Mutex
	runs    []int
}

func newHeld(hold int) *held { return &held{hold: hold, release: make(chan struct{})} }

func (h *held) run(calls []*groupcommit.Call[int, int]) {
	h.mu.Lock()
	h.runs = append(h.runs, len(calls))
	h.mu.Unlock()
	for _, c := range calls {
		if c.In == h.hold {
			<-h.release
		}
	}
	for _, c := range calls {
		c.Answer(c.In*10, nil)
	}
}

func (h *held) sizes() []int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]int(nil), h.runs...)
}

// do makes a call in a goroutine and returns where its answer comes.
func do(q *groupcommit.Queue[int, int], in int) <-chan int {
	out := make(chan int, 1)
	go func() {
		v, err := q.Do(context.Background(), in)
		if err != nil {
			v = -1
		}
		out <- v
	}()
	return out
}

func answer(t *testing.T, ch <-chan int, want int, within time.Duration) {
	t.Helper()
	select {
	case v := <-ch:
		if v != want {
			t.Fatalf("answer %d, want %d", v, want)
		}
	case <-time.After(within):
		t.Fatalf("no answer within %s", within)
	}
}

// waitRuns waits until n runs have started.
func waitRuns(t *testing.T, h *held, n int) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); len(h.sizes()) < n; {
		if time.Now().After(deadline) {
			t.Fatalf("runs %v, want %d of them", h.sizes(), n)
		}
		time.Sleep(time.Millisecond)
	}
}

// A call queued behind a run that does not end gets a run of its own once
// the slow one is Overlap old, with no further call to start it (the timer).
func TestCallBehindASlowRunStartsItsOwn(t *testing.T) {
	h := newHeld(1)
	q := &groupcommit.Queue[int, int]{Run: h.run, Overlap: 20 * time.Millisecond}
	slow := do(q, 1)
	waitRuns(t, h, 1)
	answer(t, do(q, 2), 20, 5*time.Second)
	select {
	case <-slow:
		t.Fatal("the slow call was answered before its release")
	default:
	}
	close(h.release)
	answer(t, slow, 10, 5*time.Second)
}

// Many calls behind a slow run are answered by runs beside it, never more
// than MaxRuns at once, and the slow call still gets its answer.
func TestCallsBehindASlowRunGoBesideIt(t *testing.T) {
	h := newHeld(1)
	q := &groupcommit.Queue[int, int]{Run: h.run, Overlap: 5 * time.Millisecond, MaxRuns: 2}
	slow := do(q, 1)
	waitRuns(t, h, 1)
	var outs []<-chan int
	for i := 2; i <= 200; i++ {
		outs = append(outs, do(q, i))
		if i%20 == 0 {
			time.Sleep(2 * time.Millisecond)
		}
	}
	for i, ch := range outs {
		answer(t, ch, (i+2)*10, 5*time.Second)
	}
	close(h.release)
	answer(t, slow, 10, 5*time.Second)
	answered := 0
	for _, n := range h.sizes() {
		answered += n
	}
	if answered != 200 {
		t.Fatalf("runs %v answered %d calls, want 200 (each once)", h.sizes(), answered)
	}
}

// At most MaxRuns runs are in flight, however old they are.
func TestRunsInFlightAreBounded(t *testing.T) {
	h := newHeld(0)
	q := &groupcommit.Queue[int, int]{Run: func(calls []*groupcommit.Call[int, int]) {
		h.mu.Lock()
		h.runs = append(h.runs, len(calls))
		h.mu.Unlock()
		<-h.release
		for _, c := range calls {
			c.Answer(c.In, nil)
		}
	}, Overlap: time.Millisecond, MaxRuns: 2}
	a := do(q, 1)
	waitRuns(t, h, 1)
	time.Sleep(5 * time.Millisecond)
	b := do(q, 2)
	waitRuns(t, h, 2)
	time.Sleep(5 * time.Millisecond)
	c := do(q, 3)
	time.Sleep(50 * time.Millisecond)
	if got := h.sizes(); len(got) != 2 {
		t.Fatalf("runs %v with two in flight and MaxRuns 2", got)
	}
	close(h.release)
	answer(t, a, 1, 5*time.Second)
	answer(t, b, 2, 5*time.Second)
	answer(t, c, 3, 5*time.Second)
}

// Calls made while a run younger than Overlap is in flight all go together
// as the next run, as they do without Overlap.
func TestCallsBehindAYoungRunGoTogether(t *testing.T) {
	for _, overlap := range []time.Duration{0, time.Minute} {
		h := newHeld(1)
		q := &groupcommit.Queue[int, int]{Run: h.run, Overlap: overlap}
		first := do(q, 1)
		waitRuns(t, h, 1)
		var outs []<-chan int
		for i := 2; i <= 21; i++ {
			outs = append(outs, do(q, i))
		}
		time.Sleep(50 * time.Millisecond) // every call queued
		close(h.release)
		answer(t, first, 10, 5*time.Second)
		for i, ch := range outs {
			answer(t, ch, (i+2)*10, 5*time.Second)
		}
		if got := h.sizes(); len(got) != 2 || got[1] != 20 {
			t.Fatalf("Overlap %s: runs %v, want [1 20]", overlap, got)
		}
	}
}

// TestWaitTakesAnAnswerThatCame: a caller that did other work after Start
// and finds both its answer and the end of its context takes the answer,
// every time.
func TestWaitTakesAnAnswerThatCame(t *testing.T) {
	t.Parallel()
	answered := make(chan struct{})
	q := &groupcommit.Queue[int, int]{Run: func(calls []*groupcommit.Call[int, int]) {
		for _, c := range calls {
			c.Answer(c.In*10, nil)
			answered <- struct{}{}
		}
	}}
	for i := range 200 {
		ctx, cancel := context.WithCancel(context.Background())
		c := q.Start(ctx, i)
		<-answered
		cancel()
		if got, err := c.Wait(); err != nil || got != i*10 {
			t.Fatalf("call %d answered, then its context ended: Wait got %d, %v; want %d, nil", i, got, err, i*10)
		}
	}
}

// goid is the calling goroutine's id, from its stack's header line
// ("goroutine 42 [running]:").
func goid() string {
	buf := make([]byte, 64)
	buf = buf[:runtime.Stack(buf, false)]
	id, _, _ := strings.Cut(strings.TrimPrefix(string(buf), "goroutine "), " ")
	return id
}

// A call that finds the queue idle runs on its caller's goroutine; one
// queued behind a run in flight is run by a runner.
func TestIdleCallRunsOnItsCallersGoroutine(t *testing.T) {
	ranOn := make(chan string, 2) // each run's goroutine, as it starts
	release := make(chan struct{})
	q := &groupcommit.Queue[int, int]{Run: func(calls []*groupcommit.Call[int, int]) {
		ranOn <- goid()
		if calls[0].In == 1 {
			<-release
		}
		for _, c := range calls {
			c.Answer(c.In*10, nil)
		}
	}}
	callers := make(chan string, 2)
	first := make(chan int, 1)
	go func() {
		callers <- goid()
		v, _ := q.Do(context.Background(), 1)
		first <- v
	}()
	ran1 := <-ranOn // the first call runs, held
	second := make(chan int, 1)
	go func() {
		callers <- goid()
		v, _ := q.Do(context.Background(), 2)
		second <- v
	}()
	time.Sleep(20 * time.Millisecond) // queued behind the first
	close(release)
	answer(t, first, 10, 5*time.Second)
	answer(t, second, 20, 5*time.Second)
	ran2, c1, c2 := <-ranOn, <-callers, <-callers
	if ran1 != c1 {
		t.Errorf("the idle queue's call ran on goroutine %s, its caller is %s", ran1, c1)
	}
	if ran2 == c2 || ran2 == c1 {
		t.Errorf("the queued call ran on goroutine %s, a caller's (%s, %s), not a runner's", ran2, c1, c2)
	}
}

// BenchmarkIdleDo is a call to an idle queue, one at a time: the cost of
// the queue itself when nothing waits.
func BenchmarkIdleDo(b *testing.B) {
	q := &groupcommit.Queue[int, int]{Run: func(calls []*groupcommit.Call[int, int]) {
		for _, c := range calls {
			c.Answer(c.In, nil)
		}
	}}
	ctx := context.Background()
	for i := 0; b.Loop(); i++ {
		if v, err := q.Do(ctx, i); err != nil || v != i {
			b.Fatalf("Do(%d) = %d, %v", i, v, err)
		}
	}
}

// A Run that panics on its caller's goroutine, where the caller recovers,
// leaves the queue working: the calls queued behind it and those made
// after are answered.
func TestPanicInAnIdleCallLeavesTheQueueWorking(t *testing.T) {
	running, release := make(chan struct{}), make(chan struct{})
	q := &groupcommit.Queue[int, int]{Run: func(calls []*groupcommit.Call[int, int]) {
		if calls[0].In == 1 {
			close(running)
			<-release
			panic("run of 1")
		}
		for _, c := range calls {
			c.Answer(c.In*10, nil)
		}
	}}
	recovered := make(chan any, 1)
	go func() {
		defer func() { recovered <- recover() }()
		q.Do(context.Background(), 1) //nolint:errcheck // it panics
	}()
	<-running // the first call runs, held
	queued := do(q, 2)
	time.Sleep(20 * time.Millisecond) // queued behind it
	close(release)
	if p := <-recovered; p != "run of 1" {
		t.Fatalf("recovered %v, want the run's panic", p)
	}
	answer(t, queued, 20, 5*time.Second)
	answer(t, do(q, 3), 30, 5*time.Second)
}
