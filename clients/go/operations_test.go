package idem_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	idem "github.com/idem-dev/idem/clients/go"
)

// Every thin call, by hand: begin, a second begin (409 in progress), extend, complete, begin again
// (the stored result), get, delete; release; lease lost; mismatch.
func TestOperationCalls(t *testing.T) {
	ctx, c, ns := ctxFor(t), client(), namespace(t)
	ops := c.Operations
	key := idem.Parts("order", "42")

	op, err := ops.Begin(ctx, ns, key, idem.WithRequest(map[string]any{"sku": "a", "qty": 1}), idem.WithLease(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if !op.Started() || op.Token == "" || op.ID != idem.ClaimID("order", "42") || op.LeaseExpiresAt == nil {
		t.Fatalf("begin: %+v", op)
	}

	// Held: a second begin is ErrInProgress (and ErrConflict), with Retry-After.
	_, err = ops.Begin(ctx, ns, key)
	var e *idem.Error
	if !errors.Is(err, idem.ErrInProgress) || !errors.Is(err, idem.ErrConflict) || !errors.As(err, &e) || e.RetryAfter <= 0 {
		t.Fatalf("second begin: want ErrInProgress with Retry-After, got %#v", err)
	}
	if errors.Is(err, idem.ErrLeaseLost) || errors.Is(err, idem.ErrMismatch) {
		t.Fatal("in progress must not match other sentinels")
	}
	// Another request under the same key: ErrMismatch (422), held or not.
	if _, err := ops.Begin(ctx, ns, key, idem.WithRequest(map[string]any{"sku": "b"})); !errors.Is(err, idem.ErrMismatch) {
		t.Fatalf("another request: want ErrMismatch, got %v", err)
	}
	// Delete while held: ErrInProgress.
	if _, err := ops.Delete(ctx, ns, key); !errors.Is(err, idem.ErrInProgress) {
		t.Fatalf("delete while held: %v", err)
	}

	view, err := ops.Get(ctx, ns, key)
	if err != nil || view.Status != idem.StatusInProgress || view.Token != "" || view.LeaseExpiresAt == nil {
		t.Fatalf("get while held: %+v %v", view, err)
	}
	until, err := ops.Extend(ctx, ns, op.ID, op.Token, 120*time.Second)
	if err != nil || !until.After(op.LeaseExpiresAt.Add(60*time.Second)) {
		t.Fatalf("extend: %v %v (was %v)", until, err, op.LeaseExpiresAt)
	}
	if _, err := ops.Extend(ctx, ns, op.ID, "0123456789abcdef0123456789abcdef", time.Minute); !errors.Is(err, idem.ErrLeaseLost) {
		t.Fatalf("extend with a wrong token: want ErrLeaseLost, got %v", err)
	}

	done, err := ops.Complete(ctx, ns, op.ID, op.Token, map[string]string{"order_id": "o-1"})
	if err != nil || !done.Completed() || string(done.Result) != `{"order_id":"o-1"}` || done.CompletedAt == nil || done.ExpiresAt == nil {
		t.Fatalf("complete: %+v %v", done, err)
	}
	// A second complete by the same token answers the stored result unchanged.
	again, err := ops.Complete(ctx, ns, op.ID, op.Token, "other")
	if err != nil || string(again.Result) != `{"order_id":"o-1"}` {
		t.Fatalf("second complete: %+v %v", again, err)
	}
	// Key order does not matter in the request's fingerprint.
	later, err := ops.Begin(ctx, ns, key, idem.WithRequest(json.RawMessage(`{"qty":1, "sku":"a"}`)))
	if err != nil || !later.Completed() || string(later.Result) != `{"order_id":"o-1"}` || later.Token != "" {
		t.Fatalf("begin after complete: %+v %v", later, err)
	}
	if _, err := ops.Begin(ctx, ns, key, idem.WithRequest("other")); !errors.Is(err, idem.ErrMismatch) {
		t.Fatalf("another request after complete: %v", err)
	}
	view, err = ops.Get(ctx, ns, idem.ID(op.ID))
	if err != nil || !view.Completed() || string(view.Result) != `{"order_id":"o-1"}` {
		t.Fatalf("get completed: %+v %v", view, err)
	}
	gone, err := ops.Delete(ctx, ns, key)
	if err != nil || !gone {
		t.Fatalf("delete: %v %v", gone, err)
	}
	if v, err := ops.Get(ctx, ns, key); v != nil || err != nil {
		t.Fatalf("get after delete: %+v %v", v, err)
	}
	if gone, err := ops.Delete(ctx, ns, key); gone || err != nil {
		t.Fatalf("delete absent: %v %v", gone, err)
	}

	// Release: the work failed; the key is free and the old token worthless.
	op, err = ops.Begin(ctx, ns, idem.Key("to-release"))
	if err != nil || !op.Started() {
		t.Fatal(op, err)
	}
	if err := ops.Release(ctx, ns, op.ID, op.Token); err != nil {
		t.Fatal(err)
	}
	if v, _ := ops.Get(ctx, ns, idem.Key("to-release")); v != nil {
		t.Fatalf("released key still there: %+v", v)
	}
	if err := ops.Release(ctx, ns, op.ID, op.Token); !errors.Is(err, idem.ErrLeaseLost) {
		t.Fatalf("second release: want ErrLeaseLost, got %v", err)
	}
	if _, err := ops.Complete(ctx, ns, op.ID, op.Token, 1); !errors.Is(err, idem.ErrLeaseLost) {
		t.Fatalf("complete after release: want ErrLeaseLost, got %v", err)
	}

	// A lease that runs out frees the key: the next begin takes it, and the old holder's complete
	// is refused. (Until a begin takes the key, a lease that ran out is still its holder's.)
	op, err = ops.Begin(ctx, ns, idem.Key("short-lease"), idem.WithLease(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "the lease runs out", func() bool {
		v, err := ops.Get(ctx, ns, idem.Key("short-lease"))
		return err == nil && v == nil
	})
	next, err := ops.Begin(ctx, ns, idem.Key("short-lease"))
	if err != nil || !next.Started() || next.Fence <= op.Fence {
		t.Fatalf("a begin after the lease ran out takes the key with a greater fence: %+v, %v", next, err)
	}
	if _, err := ops.Complete(ctx, ns, op.ID, op.Token, 1); !errors.Is(err, idem.ErrLeaseLost) {
		t.Fatalf("complete after the lease ran out and the key was taken: %v", err)
	}
	if _, err := ops.Complete(ctx, ns, next.ID, next.Token, 2); err != nil {
		t.Fatalf("the new holder completes: %v", err)
	}
}

// Begin's WithWait waits on the server for the holder to complete.
func TestBeginWaits(t *testing.T) {
	ctx, c, ns := ctxFor(t), client(), namespace(t)
	op, err := c.Operations.Begin(ctx, ns, idem.Key("k"))
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		time.Sleep(300 * time.Millisecond)
		_, _ = c.Operations.Complete(context.Background(), ns, op.ID, op.Token, "done")
	}()
	start := time.Now()
	got, err := c.Operations.Begin(ctx, ns, idem.Key("k"), idem.WithWait(10*time.Second))
	if err != nil || !got.Completed() || string(got.Result) != `"done"` {
		t.Fatalf("waiting begin: %+v %v", got, err)
	}
	if waited := time.Since(start); waited < 250*time.Millisecond || waited > 5*time.Second {
		t.Fatalf("waited %s", waited)
	}
}

func TestRun(t *testing.T) {
	ctx, c, ns := ctxFor(t), client(), namespace(t)
	calls := 0
	fn := func(ctx context.Context) (any, error) {
		calls++
		return map[string]any{"charge": "ch_1", "amount": 100}, nil
	}
	res, err := c.Operations.Run(ctx, ns, idem.Key("pay-1"), fn, idem.WithRequest(map[string]int{"amount": 100}))
	if err != nil || string(res) != `{"amount":100,"charge":"ch_1"}` {
		t.Fatalf("run: %s %v", res, err)
	}
	res2, err := c.Operations.Run(ctx, ns, idem.Key("pay-1"), fn, idem.WithRequest(map[string]int{"amount": 100}))
	if err != nil || string(res2) != string(res) || calls != 1 {
		t.Fatalf("second run: %s %v, %d calls", res2, err, calls)
	}
	if _, err := c.Operations.Run(ctx, ns, idem.Key("pay-1"), fn, idem.WithRequest(map[string]int{"amount": 200})); !errors.Is(err, idem.ErrMismatch) || calls != 1 {
		t.Fatalf("another request: %v, %d calls", err, calls)
	}

	// fn fails: the key is released and the error returned unchanged; a later Run runs fn again.
	boom := errors.New("provider down")
	_, err = c.Operations.Run(ctx, ns, idem.Key("pay-2"), func(context.Context) (any, error) { return nil, boom }, idem.WithLease(30*time.Second))
	if err != boom {
		t.Fatalf("want fn's error unchanged, got %v", err)
	}
	if v, _ := c.Operations.Get(ctx, ns, idem.Key("pay-2")); v != nil {
		t.Fatalf("a failed Run must release the key: %+v", v)
	}
	res, err = c.Operations.Run(ctx, ns, idem.Key("pay-2"), func(context.Context) (any, error) { return nil, nil })
	if err != nil || res != nil {
		t.Fatalf("a nil result is stored as none: %s %v", res, err)
	}

	// fn panics: the key is released and the panic goes on.
	func() {
		defer func() {
			if recover() == nil {
				t.Error("the panic must go on")
			}
		}()
		_, _ = c.Operations.Run(ctx, ns, idem.Key("pay-3"), func(context.Context) (any, error) { panic("bug") }, idem.WithLease(30*time.Second))
	}()
	if v, _ := c.Operations.Get(ctx, ns, idem.Key("pay-3")); v != nil {
		t.Fatalf("a panicking Run must release the key: %+v", v)
	}

	// A result that is not JSON: released, and an error.
	_, err = c.Operations.Run(ctx, ns, idem.Key("pay-4"), func(context.Context) (any, error) { return func() {}, nil }, idem.WithLease(30*time.Second))
	if err == nil {
		t.Fatal("a func result must be refused")
	}
	if v, _ := c.Operations.Get(ctx, ns, idem.Key("pay-4")); v != nil {
		t.Fatalf("key left held: %+v", v)
	}

	type charge struct {
		ID     string `json:"id"`
		Amount int    `json:"amount"`
	}
	got, err := idem.RunTyped(ctx, c.Operations, ns, idem.Key("pay-5"), func(context.Context) (charge, error) {
		return charge{ID: "ch_5", Amount: 5}, nil
	})
	if err != nil || got != (charge{"ch_5", 5}) {
		t.Fatalf("RunTyped: %+v %v", got, err)
	}
	got, err = idem.RunTyped(ctx, c.Operations, ns, idem.Key("pay-5"), func(context.Context) (charge, error) {
		t.Error("fn ran twice")
		return charge{}, nil
	})
	if err != nil || got != (charge{"ch_5", 5}) {
		t.Fatalf("RunTyped again: %+v %v", got, err)
	}
}

// A function slower than half its lease keeps the key: Run extends the lease while it runs. A
// second Run of the key meanwhile waits and gets the stored result, without running fn again.
func TestRunExtendsTheLeaseAndWaiters(t *testing.T) {
	ctx, c, ns := ctxFor(t), client(), namespace(t)
	key := idem.Key("slow")
	const lease = 2 * time.Second
	var calls atomic.Int32
	inside := make(chan struct{})
	release := make(chan struct{})
	fn := func(ctx context.Context) (any, error) {
		calls.Add(1)
		close(inside)
		select {
		case <-release:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		return "slow result", nil
	}
	type outcome struct {
		res json.RawMessage
		err error
	}
	first := make(chan outcome, 1)
	start := time.Now()
	go func() {
		res, err := c.Operations.Run(ctx, ns, key, fn, idem.WithLease(lease))
		first <- outcome{res, err}
	}()
	<-inside
	second := make(chan outcome, 1)
	go func() {
		res, err := c.Operations.Run(ctx, ns, key, func(context.Context) (any, error) {
			calls.Add(1)
			return "second", nil
		}, idem.WithLease(lease))
		second <- outcome{res, err}
	}()

	// Well past the first lease (2 s), the key is still held and its lease ends in the future.
	time.Sleep(lease + lease/2)
	view, err := c.Operations.Get(ctx, ns, key)
	if err != nil || view == nil || view.Status != idem.StatusInProgress {
		t.Fatalf("after %s the key must still be held: %+v %v", time.Since(start), view, err)
	}
	if !view.LeaseExpiresAt.After(start.Add(lease)) || !view.LeaseExpiresAt.After(time.Now()) {
		t.Fatalf("the lease was not extended: ends %v, began %v", view.LeaseExpiresAt, start)
	}
	if _, err := c.Operations.Begin(ctx, ns, key); !errors.Is(err, idem.ErrInProgress) {
		t.Fatalf("a begin while extended: %v", err)
	}
	select {
	case o := <-second:
		t.Fatalf("the second Run returned while the first ran: %s %v", o.res, o.err)
	default:
	}
	close(release)
	o1, o2 := <-first, <-second
	if o1.err != nil || string(o1.res) != `"slow result"` {
		t.Fatalf("first: %s %v", o1.res, o1.err)
	}
	if o2.err != nil || string(o2.res) != `"slow result"` {
		t.Fatalf("second must get the stored result: %s %v", o2.res, o2.err)
	}
	if n := calls.Load(); n != 1 {
		t.Fatalf("fn ran %d times", n)
	}
}

// 20 goroutines race one key: fn runs once, and every Run returns its result.
func TestRunRace(t *testing.T) {
	ctx, c, ns := ctxFor(t), client(), namespace(t)
	var calls atomic.Int32
	var wg sync.WaitGroup
	results := make([]string, 20)
	errs := make([]error, 20)
	for i := 0; i < 20; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			res, err := c.Operations.Run(ctx, ns, idem.Key("once"), func(context.Context) (any, error) {
				n := calls.Add(1)
				time.Sleep(300 * time.Millisecond)
				return map[string]any{"run": n, "by": i}, nil
			})
			results[i], errs[i] = string(res), err
		}(i)
	}
	wg.Wait()
	if n := calls.Load(); n != 1 {
		t.Fatalf("fn ran %d times", n)
	}
	for i := range results {
		if errs[i] != nil || results[i] != results[0] || results[i] == "" {
			t.Fatalf("run %d: %s %v (run 0: %s)", i, results[i], errs[i], results[0])
		}
	}
}

// Run gives up waiting after WithWait, with ErrInProgress; a holder that releases lets a waiter
// take the key and run fn itself.
func TestRunWaitLimitAndTakeover(t *testing.T) {
	ctx, c, ns := ctxFor(t), client(), namespace(t)
	op, err := c.Operations.Begin(ctx, ns, idem.Key("held"), idem.WithLease(60*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err = c.Operations.Run(ctx, ns, idem.Key("held"), func(context.Context) (any, error) {
		t.Error("fn ran while held")
		return nil, nil
	}, idem.WithWait(1500*time.Millisecond))
	if !errors.Is(err, idem.ErrInProgress) {
		t.Fatalf("want ErrInProgress, got %v", err)
	}
	if d := time.Since(start); d < time.Second || d > 5*time.Second {
		t.Fatalf("gave up after %s, want about 1.5 s", d)
	}

	go func() {
		time.Sleep(300 * time.Millisecond)
		_ = c.Operations.Release(context.Background(), ns, op.ID, op.Token)
	}()
	res, err := c.Operations.Run(ctx, ns, idem.Key("held"), func(context.Context) (any, error) { return "mine", nil })
	if err != nil || string(res) != `"mine"` {
		t.Fatalf("after the holder released: %s %v", res, err)
	}
}

// A cancelled context stops fn, releases the key and returns the context's error.
func TestRunContextCancelled(t *testing.T) {
	c, ns := client(), namespace(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	_, err := c.Operations.Run(ctx, ns, idem.Key("k"), func(ctx context.Context) (any, error) {
		cancel()
		<-ctx.Done()
		return nil, ctx.Err()
	}, idem.WithLease(60*time.Second))
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("want context.Canceled, got %v", err)
	}
	if v, err := c.Operations.Get(context.Background(), ns, idem.Key("k")); v != nil || err != nil {
		t.Fatalf("the key must be released: %+v %v", v, err)
	}
}

// A lease that runs out while fn runs (heartbeats too rare to keep it) and is taken by another
// caller: fn's context is cancelled when a heartbeat is answered lease-lost, nothing is stored, and
// Run returns ErrLeaseLost. (A lease that ran out is still its holder's until another begin takes
// the key: the other caller's begin is what loses it.)
func TestRunLeaseLost(t *testing.T) {
	ctx, c, ns := ctxFor(t), client(), namespace(t)
	other := make(chan *idem.Operation, 1)
	takeOver := func(key string) {
		op, err := c.Operations.Begin(ctx, ns, idem.Key(key), idem.WithLease(30*time.Second))
		if err != nil || !op.Started() {
			t.Errorf("another caller's begin after the lease ran out: %+v %v", op, err)
		}
		other <- op
	}
	_, err := c.Operations.Run(ctx, ns, idem.Key("lost"), func(ctx context.Context) (any, error) {
		time.Sleep(1200 * time.Millisecond) // past the 1 s lease, before the first beat (1.5 s)
		takeOver("lost")
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(10 * time.Second):
			return "too late", nil
		}
	}, idem.WithLease(time.Second), idem.WithHeartbeat(1500*time.Millisecond))
	if !errors.Is(err, idem.ErrLeaseLost) {
		t.Fatalf("want ErrLeaseLost, got %v", err)
	}
	taker := <-other
	if v, err := c.Operations.Get(ctx, ns, idem.Key("lost")); err != nil || v == nil || v.Status != idem.StatusInProgress {
		t.Fatalf("nothing may be stored: the other caller holds the key: %+v %v", v, err)
	}
	_ = c.Operations.Release(ctx, ns, taker.ID, taker.Token)

	// fn finishes after its lease ended and another caller took the key, before any heartbeat:
	// the complete is refused.
	_, err = c.Operations.Run(ctx, ns, idem.Key("late"), func(ctx context.Context) (any, error) {
		time.Sleep(1200 * time.Millisecond)
		takeOver("late")
		return "late", nil
	}, idem.WithLease(time.Second), idem.WithHeartbeat(time.Hour))
	if !errors.Is(err, idem.ErrLeaseLost) {
		t.Fatalf("a complete after the lease: want ErrLeaseLost, got %v", err)
	}
	<-other
}
