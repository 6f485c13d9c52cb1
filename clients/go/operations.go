package idem

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync/atomic"
	"time"
)

// Operation statuses.
const (
	// StatusStarted: Begin's answer when the caller now holds the key and must do the work.
	StatusStarted = "started"
	// StatusInProgress: Get's answer while someone holds the key.
	StatusInProgress = "in_progress"
	// StatusCompleted: the work was done; Result is what was stored.
	StatusCompleted = "completed"
)

// Operation is an operation record as Begin, Complete and Get answer it, with the API's fields.
type Operation struct {
	// Status is StatusStarted (Begin only), StatusInProgress (Get only) or StatusCompleted.
	Status string `json:"status"`
	ID     string `json:"id"`
	// Token proves the hold to Complete, Release and Extend: Begin's StatusStarted answer only.
	// Keep it private.
	Token          string     `json:"token,omitempty"`
	LeaseExpiresAt *time.Time `json:"lease_expires_at,omitempty"`
	// Fence is the lease's fencing number (Begin's StatusStarted answer only; 0 otherwise): every
	// later take of the key gets a greater one. Send it with the work's writes so that what they
	// write to can refuse a write whose fence is smaller than one it has seen, from a holder
	// paused past its lease whose key another caller has taken since.
	Fence uint64 `json:"fence,omitempty"`
	// Result is the stored result as JSON (nil when the work stored none).
	Result      json.RawMessage `json:"result,omitempty"`
	CompletedAt *time.Time      `json:"completed_at,omitempty"`
	// ExpiresAt is when a completed result is forgotten.
	ExpiresAt *time.Time `json:"expires_at,omitempty"`
}

// Started reports whether the caller holds the key (Begin answered StatusStarted).
func (o *Operation) Started() bool { return o.Status == StatusStarted }

// Completed reports whether the work was done and Result is stored.
func (o *Operation) Completed() bool { return o.Status == StatusCompleted }

// UnmarshalJSON normalises a JSON null result to nil.
func (o *Operation) UnmarshalJSON(b []byte) error {
	type plain Operation
	if err := json.Unmarshal(b, (*plain)(o)); err != nil {
		return err
	}
	o.Result = nullToNil(o.Result)
	return nil
}

// WithRequest describes the work (any JSON): the same key begun later with another request gets
// ErrMismatch (422). Without it a begin matches any request.
func WithRequest(v any) CallOption {
	return func(o *callOptions) { o.request = v; o.given = append(o.given, "WithRequest") }
}

// WithLease is how long a hold lasts without an Extend: 1 s to 1 h, whole seconds rounded up
// (default 60 s).
func WithLease(d time.Duration) CallOption {
	return func(o *callOptions) { o.lease = d; o.given = append(o.given, "WithLease") }
}

// WithWait: for Begin, how long the server waits (0–30 s) for a running holder to finish before
// answering ErrInProgress (default 0); for Run, how long in total to wait for a running holder
// (default 90 s, longer than the default lease of a holder that died).
func WithWait(d time.Duration) CallOption {
	return func(o *callOptions) { o.wait, o.hasWait = d, true; o.given = append(o.given, "WithWait") }
}

// WithHeartbeat sets how often Run extends the lease while the function runs (default: a third
// of the lease). Mostly for tests.
func WithHeartbeat(d time.Duration) CallOption {
	return func(o *callOptions) { o.heartbeat = d; o.given = append(o.given, "WithHeartbeat") }
}

// Operations is the Operations API (docs/reference/api.md#operations): c.Operations.
type Operations struct{ t *transport }

const (
	defaultLease   = 60 * time.Second
	defaultRunWait = 90 * time.Second
	maxServerWait  = 30 * time.Second
)

func opsPath(ns string) string { return "/v1/operations/" + seg(ns) }

// Begin begins an operation. Started(): this caller holds the key (Token, LeaseExpiresAt) and
// does the work, then calls Complete or Release. Completed(): the work was done before; Result is
// the stored result. Errors: ErrInProgress while another caller holds the key (after the server
// waited WithWait for it), ErrMismatch for another WithRequest. Every attempt carries the same
// client token, so a retry of a begin that took the key, its answer lost, gets the same lease
// (Token, Fence) back. Options: WithRequest, WithLease, WithTTL, WithWait, WithClientToken.
func (o *Operations) Begin(ctx context.Context, ns string, key KeyRef, opts ...CallOption) (*Operation, error) {
	c, err := collect("Begin", []string{"WithRequest", "WithLease", "WithTTL", "WithWait", "WithClientToken"}, opts)
	if err != nil {
		return nil, err
	}
	return o.begin(ctx, ns, key, c, c.wait)
}

func (o *Operations) begin(ctx context.Context, ns string, key KeyRef, c *callOptions, wait time.Duration) (*Operation, error) {
	body := map[string]any{}
	if err := key.body(body); err != nil {
		return nil, err
	}
	if c.request != nil {
		body["request"] = c.request
	}
	if c.lease != 0 {
		body["lease_seconds"] = seconds(c.lease)
	}
	if c.ttl != 0 {
		body["ttl_seconds"] = seconds(c.ttl)
	}
	if wait > 0 {
		body["wait_seconds"] = seconds(wait)
	}
	var err error
	if body["client_token"], err = c.clientTokenOf(); err != nil {
		return nil, err
	}
	var out Operation
	req := request{method: "POST", path: opsPath(ns) + "/begin", json: body, extraTimeout: wait, shape: shapeBegin}
	if err := o.t.call(ctx, req, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Complete stores the result (any value encoding/json can marshal, at most 64 KiB of JSON; nil
// stores none) and finishes the operation: waiters and later begins get it. ErrLeaseLost when
// the token no longer holds the key. A second Complete with the same token answers the stored
// result unchanged.
func (o *Operations) Complete(ctx context.Context, ns, id, token string, result any) (*Operation, error) {
	body := map[string]any{"token": token}
	if result != nil {
		body["result"] = result
	}
	var out Operation
	req := request{method: "POST", path: opsPath(ns) + "/" + seg(id) + "/complete", json: body, shape: shapeCompleted}
	if err := o.t.call(ctx, req, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Release frees the key after failed work, so that it may run again. ErrLeaseLost when the token
// no longer holds it.
func (o *Operations) Release(ctx context.Context, ns, id, token string) error {
	req := request{method: "POST", path: opsPath(ns) + "/" + seg(id) + "/release", json: map[string]any{"token": token}}
	return o.t.call(ctx, req, nil)
}

// Extend is a heartbeat: the token holds the key for lease more from now. It answers the new end
// of the lease; ErrLeaseLost when the token no longer holds the key.
func (o *Operations) Extend(ctx context.Context, ns, id, token string, lease time.Duration) (time.Time, error) {
	return o.extend(ctx, ns, id, token, lease, request{})
}

// extend sends an extend with the transport settings of how (a heartbeat's: one attempt, its own
// timeout).
func (o *Operations) extend(ctx context.Context, ns, id, token string, lease time.Duration, how request) (time.Time, error) {
	var out struct {
		LeaseExpiresAt time.Time `json:"lease_expires_at"`
	}
	req := request{method: "POST", path: opsPath(ns) + "/" + seg(id) + "/extend",
		json: map[string]any{"token": token, "lease_seconds": seconds(lease)}, shape: shapeExtended,
		timeout: how.timeout, once: how.once}
	if err := o.t.call(ctx, req, &out); err != nil {
		return time.Time{}, err
	}
	return out.LeaseExpiresAt, nil
}

// Get returns the operation of a key (Key, Parts or ID): StatusInProgress or StatusCompleted
// (never the token), or nil, nil when there is none.
func (o *Operations) Get(ctx context.Context, ns string, key KeyRef) (*Operation, error) {
	id, err := key.resolve()
	if err != nil {
		return nil, err
	}
	var out Operation
	err = o.t.call(ctx, request{method: "GET", path: opsPath(ns) + "/" + seg(id), shape: shapeOperation}, &out)
	if errors.Is(err, ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return &out, nil
}

// Delete forgets a completed result: true, or false when there was none. ErrInProgress while the
// key is held.
func (o *Operations) Delete(ctx context.Context, ns string, key KeyRef) (bool, error) {
	id, err := key.resolve()
	if err != nil {
		return false, err
	}
	err = o.t.call(ctx, request{method: "DELETE", path: opsPath(ns) + "/" + seg(id)}, nil)
	if errors.Is(err, ErrNotFound) {
		return false, nil
	}
	return err == nil, err
}

// Run does fn once per key and returns its result as stored (JSON; nil when fn returned nil):
//
//  1. It begins the operation. If this call holds the key, fn runs with a context that is
//     cancelled if the lease is lost.
//  2. While fn runs, the lease is extended every third of it, counted from before the begin (then
//     each extension) was sent, so work longer than the lease keeps its key. An extension that
//     fails (no answer, a 5xx, a timeout: one attempt each, at most a third of the lease) is tried
//     again 250 ms later, again and again, until one gets through — past the lease's end too, since
//     a lease that ran out is still this caller's until another begin takes the key.
//  3. fn returns a value: it is stored with Complete, and Run returns it as stored, exactly as
//     every later Run of the key will get it.
//  4. The work was completed before: the stored result is returned and fn is not called.
//  5. fn returns an error (or panics): the key is released, so that a later Run runs fn again,
//     and the error is returned unchanged (the panic goes on).
//  6. Another caller holds the key: Run waits for it, on the server (woken as soon as the holder
//     completes) and by Retry-After, up to WithWait in total (default 90 s), then returns
//     ErrInProgress. If the holder releases, or its lease ends, this call takes the key and runs
//     fn itself.
//  7. The key was begun with another WithRequest: ErrMismatch, fn not called.
//  8. The lease was lost while fn ran (a heartbeat was answered lease-lost: another caller took
//     the key after it ran out): fn's context is cancelled and Run returns ErrLeaseLost; the result
//     was not stored, and another caller may have run the work.
//
// Every begin of one Run (the transport's retries, and the begins of step 6) carries one client
// token, so a begin that took the key but whose answer was lost still hands this call the lease.
//
// Options: WithRequest, WithLease, WithTTL, WithWait, WithHeartbeat, WithClientToken.
func (o *Operations) Run(ctx context.Context, ns string, key KeyRef, fn func(ctx context.Context) (any, error), opts ...CallOption) (json.RawMessage, error) {
	c, err := collect("Run", []string{"WithRequest", "WithLease", "WithTTL", "WithWait", "WithHeartbeat", "WithClientToken"}, opts)
	if err != nil {
		return nil, err
	}
	// One token for the whole run: each begin below is the same request, asked again.
	if c.clientToken, err = c.clientTokenOf(); err != nil {
		return nil, err
	}
	c.hasClientToken = true
	if c.lease == 0 {
		c.lease = defaultLease
	}
	total := defaultRunWait
	if c.hasWait {
		total = c.wait
	}
	deadline := time.Now().Add(total)
	for attempt := 0; ; attempt++ {
		serverWait := time.Until(deadline).Truncate(time.Second)
		if serverWait > maxServerWait {
			serverWait = maxServerWait
		}
		if serverWait < 0 {
			serverWait = 0
		}
		sent := time.Now()
		op, err := o.begin(ctx, ns, key, c, serverWait)
		if err != nil {
			if !errors.Is(err, ErrInProgress) {
				return nil, err
			}
			left := time.Until(deadline)
			if left <= 0 {
				return nil, err
			}
			var wait time.Duration
			switch {
			case serverWait == 0:
				// Less than a second left to wait on the server: ask again after Retry-After.
				wait = o.t.backoff(attempt)
				var ie *Error
				if errors.As(err, &ie) && ie.RetryAfter > 0 {
					wait = ie.RetryAfter
				}
			case time.Since(sent) < serverWait:
				// The server answered before its wait was over: the key changed hands (the holder
				// released and another waiter took it). Wait on the server again, after a short
				// pause (not Retry-After: the new holder may complete much sooner).
				wait = o.t.backoff(attempt)
				if wait > time.Second {
					wait = time.Second
				}
			}
			if wait > left {
				wait = left
			}
			if wait > 0 {
				if serr := sleep(ctx, wait); serr != nil {
					return nil, serr
				}
			}
			continue
		}
		if op.Completed() {
			return op.Result, nil
		}
		if !op.Started() {
			return nil, fmt.Errorf("idem: POST %s/begin answered status %q", opsPath(ns), op.Status)
		}
		// The lease counts from before this begin was sent, as the server counts it: a begin held
		// up on the way (or retried) has used part of it.
		return o.hold(ctx, ns, op, c, sent, fn)
	}
}

// retryBeat is how soon a heartbeat that failed (no answer, a 5xx, a timeout) is tried again.
const retryBeat = 250 * time.Millisecond

// hold runs fn while holding op's key, heartbeating, then completes or releases. The heartbeat
// follows the gateway's rule (see Run): the lease counted from leasedAt, before the begin was sent.
func (o *Operations) hold(ctx context.Context, ns string, op *Operation, c *callOptions, leasedAt time.Time, fn func(ctx context.Context) (any, error)) (json.RawMessage, error) {
	fctx, cancelFn := context.WithCancel(ctx)
	defer cancelFn()
	every := c.heartbeat
	if every <= 0 {
		every = c.lease / 3
	}
	if every < 10*time.Millisecond {
		every = 10 * time.Millisecond // never a busy loop
	}
	// One attempt's timeout: the client's, at most a third of the lease.
	attempt := o.t.timeout
	if third := c.lease / 3; third < attempt {
		attempt = third
	}
	var lost atomic.Bool
	var lostErr error // the Extend's lease-lost error, set before lost
	beatCtx, stopBeats := context.WithCancel(ctx)
	beats := make(chan struct{})
	go func() {
		defer close(beats)
		beatAt := leasedAt.Add(every)
		for {
			if sleep(beatCtx, time.Until(beatAt)) != nil {
				return
			}
			askedAt := time.Now()
			_, err := o.extend(beatCtx, ns, op.ID, op.Token, c.lease, request{timeout: attempt, once: true})
			switch {
			case err == nil:
				beatAt = askedAt.Add(every)
			case errors.Is(err, ErrLeaseLost):
				lostErr = err
				lost.Store(true)
				cancelFn()
				return
			case beatCtx.Err() != nil:
				return
			default:
				// Soon again, not a whole interval later: the lease was not extended.
				beatAt = time.Now().Add(retryBeat)
			}
		}
	}()
	stop := func() {
		stopBeats()
		<-beats
	}

	value, panicked, ferr := callFn(fctx, fn)
	stop()
	if panicked != nil || ferr != nil {
		if !lost.Load() {
			o.releaseDetached(ctx, ns, op)
		}
		if panicked != nil {
			panic(panicked)
		}
		if lost.Load() {
			// fn most likely stopped because its context was cancelled for the lost lease.
			return nil, fmt.Errorf("%w (the function returned: %v)", lostErr, ferr)
		}
		return nil, ferr
	}
	var result any
	if value != nil {
		b, err := json.Marshal(value)
		if err != nil {
			o.releaseDetached(ctx, ns, op)
			return nil, fmt.Errorf("idem: Run: the result of the function is not JSON: %w", err)
		}
		result = json.RawMessage(b)
	}
	done, err := o.Complete(ctx, ns, op.ID, op.Token, result)
	if err != nil {
		// Not stored (too large, no answer…): free the key for a retry, unless the lease is gone.
		if !errors.Is(err, ErrLeaseLost) {
			o.releaseDetached(ctx, ns, op)
		}
		return nil, err
	}
	return done.Result, nil
}

// callFn runs fn, catching a panic so that the key can be released before it goes on.
func callFn(ctx context.Context, fn func(ctx context.Context) (any, error)) (v any, panicked any, err error) {
	defer func() {
		if r := recover(); r != nil {
			panicked = r
		}
	}()
	v, err = fn(ctx)
	return v, nil, err
}

// releaseDetached releases op's key even when ctx has ended (the caller gave up, but the key
// should not stay held until its lease runs out). Its failure leaves the lease to run out.
func (o *Operations) releaseDetached(ctx context.Context, ns string, op *Operation) {
	base := ctx
	if ctx.Err() != nil {
		base = context.Background()
	}
	rctx, cancel := context.WithTimeout(base, o.t.timeout)
	defer cancel()
	_ = o.Release(rctx, ns, op.ID, op.Token)
}

// RunTyped is Run for a function with a result type: the stored result is decoded into a T (the
// same T on the first call and on every later one, since every call decodes what was stored).
//
//	order, err := idem.RunTyped(ctx, c.Operations, "orders", idem.Key(key), func(ctx context.Context) (Order, error) {
//		return createOrder(ctx, cart)
//	}, idem.WithRequest(cart))
func RunTyped[T any](ctx context.Context, ops *Operations, ns string, key KeyRef, fn func(ctx context.Context) (T, error), opts ...CallOption) (T, error) {
	var zero T
	raw, err := ops.Run(ctx, ns, key, func(ctx context.Context) (any, error) {
		v, err := fn(ctx)
		if err != nil {
			return nil, err
		}
		return v, nil
	}, opts...)
	if err != nil {
		return zero, err
	}
	var out T
	if len(raw) == 0 {
		return out, nil
	}
	if err := json.Unmarshal(raw, &out); err != nil {
		return zero, fmt.Errorf("idem: RunTyped: the stored result does not decode into %T: %w", out, err)
	}
	return out, nil
}
