package idem_test

// Run's heartbeat follows the gateway's rule: the lease counts from before the begin was sent; it
// is extended every third of the lease; a failed extension is tried again within 250 ms (one
// attempt each), so a store outage of a few seconds at the beat costs nothing. Against a fake
// Operations API, and against the real idem behind a proxy that fails its extends.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	idem "github.com/idem-dev/idem/clients/go"
)

// opsFake is just enough of the Operations API to drive Run: a begin starts (after beginDelay),
// a complete completes, and an extend is answered by extend(n) (n from 1) when it writes an
// answer, else 200. Every call's arrival is logged.
type opsFake struct {
	beginDelay time.Duration
	extend     func(n int, w http.ResponseWriter) bool

	mu      sync.Mutex
	log     []call
	extends int
}

type call struct {
	what string
	at   time.Time
}

func (f *opsFake) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	what := r.URL.Path[strings.LastIndex(r.URL.Path, "/")+1:]
	f.mu.Lock()
	f.log = append(f.log, call{what, time.Now()})
	if what == "extend" {
		f.extends++
	}
	n := f.extends
	f.mu.Unlock()
	var body struct {
		Result json.RawMessage `json:"result"`
	}
	_ = json.NewDecoder(r.Body).Decode(&body)
	w.Header().Set("Content-Type", "application/json")
	switch what {
	case "begin":
		time.Sleep(f.beginDelay)
		w.WriteHeader(201)
		fmt.Fprint(w, `{"status":"started","id":"op1","token":"tok","lease_expires_at":"2026-01-01T00:00:00Z","fence":1}`)
	case "extend":
		if f.extend != nil && f.extend(n, w) {
			return
		}
		fmt.Fprint(w, `{"lease_expires_at":"2026-01-01T00:00:00Z"}`)
	case "complete":
		if len(body.Result) == 0 {
			body.Result = json.RawMessage("null")
		}
		fmt.Fprintf(w, `{"status":"completed","id":"op1","result":%s,"completed_at":"2026-01-01T00:00:00Z","expires_at":"2026-01-02T00:00:00Z"}`, body.Result)
	case "release":
		w.WriteHeader(204)
	}
}

// at is when each call of what came, since the begin arrived.
func (f *opsFake) at(what string) []time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	var begun time.Time
	var out []time.Duration
	for _, c := range f.log {
		if c.what == "begin" && begun.IsZero() {
			begun = c.at
		}
		if c.what == what {
			out = append(out, c.at.Sub(begun).Round(time.Millisecond))
		}
	}
	return out
}

func (f *opsFake) client(t *testing.T) *idem.Client {
	s := httptest.NewServer(f)
	t.Cleanup(s.Close)
	return idem.New(s.URL, idem.WithBackoff(time.Second, time.Second))
}

func work(d time.Duration, result string) func(context.Context) (any, error) {
	return func(ctx context.Context) (any, error) {
		select {
		case <-time.After(d):
			return result, nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// The begin's answer comes 200 ms late: the first beat is due a third of the lease (1 s) after the
// begin was sent, not after its answer; the next a third after that one.
func TestHeartbeatEveryThirdCountedFromBeforeTheBegin(t *testing.T) {
	f := &opsFake{beginDelay: 200 * time.Millisecond}
	res, err := f.client(t).Operations.Run(context.Background(), "ns", idem.Key("k"), work(2300*time.Millisecond, "ok"), idem.WithLease(3*time.Second))
	if err != nil || string(res) != `"ok"` {
		t.Fatalf("%s %v", res, err)
	}
	beats := f.at("extend")
	if len(beats) < 2 || beats[0] < 900*time.Millisecond || beats[0] > 1300*time.Millisecond ||
		beats[1]-beats[0] < 900*time.Millisecond || beats[1]-beats[0] > 1300*time.Millisecond {
		t.Fatalf("beats at %v, want at 1 s and 2 s after the begin was sent", beats)
	}
}

// Three extends answered 503 with Retry-After: 1: each is one attempt (no transport retry, no
// Retry-After wait), tried again 250 ms later, not a whole interval later.
func TestHeartbeatFailedIsTriedAgainWithin250ms(t *testing.T) {
	f := &opsFake{extend: func(n int, w http.ResponseWriter) bool {
		if n > 3 {
			return false
		}
		problem(w, 503, "urn:idem:problem:store-unavailable", "Retry-After", "1")
		return true
	}}
	res, err := f.client(t).Operations.Run(context.Background(), "ns", idem.Key("k"), work(1900*time.Millisecond, "kept"), idem.WithLease(2*time.Second))
	if err != nil || string(res) != `"kept"` {
		t.Fatalf("%s %v", res, err)
	}
	beats := f.at("extend")
	if len(beats) < 4 || beats[0] < 600*time.Millisecond || beats[0] > 800*time.Millisecond {
		t.Fatalf("beats at %v", beats)
	}
	for i := 1; i < 4; i++ {
		if gap := beats[i] - beats[i-1]; gap < 200*time.Millisecond || gap > 550*time.Millisecond {
			t.Fatalf("a failed beat was tried again after %s: %v", gap, beats)
		}
	}
}

// A lease that ran out is still this caller's until another takes the key: the beats go on every
// 250 ms past the lease's end, and the one that gets through keeps the work going.
func TestHeartbeatGoesOnPastTheLeaseEnd(t *testing.T) {
	f := &opsFake{extend: func(n int, w http.ResponseWriter) bool {
		if n > 5 {
			return false
		}
		w.Header().Set("Content-Type", "text/plain")
		w.WriteHeader(502)
		fmt.Fprint(w, "bad gateway")
		return true
	}}
	res, err := f.client(t).Operations.Run(context.Background(), "ns", idem.Key("k"), work(1900*time.Millisecond, "late"), idem.WithLease(time.Second))
	if err != nil || string(res) != `"late"` {
		t.Fatalf("%s %v", res, err)
	}
	beats := f.at("extend")
	if len(beats) < 6 || beats[5] < time.Second {
		t.Fatalf("beats at %v", beats)
	}
	for i := 1; i < 6; i++ {
		if gap := beats[i] - beats[i-1]; gap > 550*time.Millisecond {
			t.Fatalf("a failed beat was tried again after %s: %v", gap, beats)
		}
	}
}

// A 2xx answer without the fields a call needs (a server that answers anything) is the not-idem
// *Error naming the URL, never a result: Claimed missing is not Claimed false.
func TestNotIdemSuccessAnswers(t *testing.T) {
	answers := map[string]func(w http.ResponseWriter){
		"200 {}": func(w http.ResponseWriter) {
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprint(w, `{}`)
		},
		"200 text/html": func(w http.ResponseWriter) {
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			fmt.Fprint(w, `<html><body>Welcome</body></html>`)
		},
		"200 with the wrong types": func(w http.ResponseWriter) {
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprint(w, `{"claimed":"yes","id":7,"results":[{}],"exists":"no","status":"started","token":"","items":{},`+
				`"deleted":"1","lease_expires_at":null,"receipts":null,"receipt_id":1,"matching":"2","queued":1.5,"replay":0}`)
		},
	}
	ctx := context.Background()
	for name, answer := range answers {
		answer := answer
		s, _ := fakeIdem(t, func(i int, w http.ResponseWriter, r *http.Request) { answer(w) })
		c := idem.New(s.URL, idem.WithRetries(0))
		calls := []struct {
			what string
			call func() error
		}{
			{"POST /v1/claims/survey", func() error { _, err := c.Claims.Claim(ctx, "survey", idem.Key("k")); return err }},
			{"POST /v1/claims/survey/batch", func() error {
				_, err := c.Claims.ClaimBatch(ctx, "survey", []idem.Item{{Key: "k"}})
				return err
			}},
			{"POST /v1/claims/survey/lookup", func() error {
				_, err := c.Claims.Lookup(ctx, "survey", []idem.Item{{Key: "k"}})
				return err
			}},
			{"POST /v1/claims/survey/prefix", func() error { _, err := c.Claims.Exists(ctx, "survey", "a"); return err }},
			{"GET /v1/claims/survey/", func() error { _, err := c.Claims.Get(ctx, "survey", idem.Key("k")); return err }},
			{"GET /v1/claims/survey", func() error {
				_, err := c.Claims.List(ctx, "survey", idem.ClaimFilter{Prefix: []string{"a"}})
				return err
			}},
			{"DELETE /v1/claims/survey", func() error { _, err := c.Claims.DeletePrefix(ctx, "survey", "a"); return err }},
			{"POST /v1/operations/orders/begin", func() error { _, err := c.Operations.Begin(ctx, "orders", idem.Key("k")); return err }},
			{"POST /v1/operations/orders/begin", func() error {
				_, err := c.Operations.Run(ctx, "orders", idem.Key("k"), work(0, "never"))
				return err
			}},
			{"POST /v1/operations/orders/op1/complete", func() error {
				_, err := c.Operations.Complete(ctx, "orders", "op1", "t", 1)
				return err
			}},
			{"POST /v1/operations/orders/op1/extend", func() error {
				_, err := c.Operations.Extend(ctx, "orders", "op1", "t", time.Minute)
				return err
			}},
			{"GET /v1/operations/orders/", func() error { _, err := c.Operations.Get(ctx, "orders", idem.Key("k")); return err }},
			{"GET /v1/receipts", func() error { _, err := c.Receipts.List(ctx, idem.ReceiptFilter{}); return err }},
			{"GET /v1/receipts/rcpt_1", func() error { _, err := c.Receipts.Get(ctx, "rcpt_1"); return err }},
			{"POST /v1/receipts/rcpt_1/replay", func() error { return c.Receipts.Replay(ctx, "rcpt_1") }},
			{"POST /v1/receipts/rcpt_1/discard", func() error { return c.Receipts.Discard(ctx, "rcpt_1") }},
			{"POST /v1/receipts/replay", func() error { _, err := c.Receipts.CountMatching(ctx, idem.BulkFilter{}); return err }},
			{"POST /v1/receipts/replay", func() error { _, err := c.Receipts.ReplayMatching(ctx, idem.BulkFilter{}); return err }},
			{"POST /v1/sources/partner/events", func() error {
				_, err := c.Events.Send(ctx, "partner", []byte(`{"id":"e1"}`), nil)
				return err
			}},
		}
		for _, tc := range calls {
			err := tc.call()
			var e *idem.Error
			if !errors.As(err, &e) || e.Status != 200 || !e.NotIdem || !errors.Is(err, idem.ErrNotIdem) {
				t.Fatalf("%s, %s: %#v", name, tc.what, err)
			}
			msg := err.Error()
			if !strings.HasPrefix(msg, "idem: "+tc.what) || !strings.Contains(msg, ": 200 Invalid response: "+s.URL+" answered 200 ") ||
				!strings.HasSuffix(msg, "it does not look like idem (check the URL given to idem.New, or IDEM_URL)") {
				t.Fatalf("%s, %s: %s", name, tc.what, msg)
			}
			if strings.Contains(msg, "not JSON (text/html; charset=utf-8)") != (name == "200 text/html") {
				t.Fatalf("%s, %s: %s", name, tc.what, msg)
			}
		}
	}

	// A record without claimed is not "not claimed".
	s, _ := fakeIdem(t, func(i int, w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"namespace":"survey","id":"x","parts":["a"],"data":null,"created_at":"2026-01-01T00:00:00Z","expires_at":null}`)
	})
	_, err := idem.New(s.URL, idem.WithRetries(0)).Claims.Claim(ctx, "survey", idem.Parts("a"))
	if !errors.Is(err, idem.ErrNotIdem) || !strings.Contains(err.Error(), "expected { claimed: boolean, id: string }") {
		t.Fatalf("a claim answered without claimed: %v", err)
	}
}

// outageProxy forwards to the real idem, but answers every extend that arrives between from and
// to after the first begin with 503 store-unavailable and Retry-After: 1; a begin's answer is held
// back beginDelay. It logs each request's arrival and what its client was answered.
type outageProxy struct {
	from, to, beginDelay time.Duration

	mu    sync.Mutex
	begun time.Time
	log   []beat
}

type beat struct {
	path   string
	at     time.Duration // since the first begin arrived
	status int
}

func newOutageProxy(t *testing.T, p *outageProxy) *httptest.Server {
	target, _ := url.Parse(srv.URL)
	rp := httputil.NewSingleHostReverseProxy(target)
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		now := time.Now()
		p.mu.Lock()
		if strings.HasSuffix(r.URL.Path, "/begin") && p.begun.IsZero() {
			p.begun = now
		}
		at := now.Sub(p.begun)
		i := len(p.log)
		p.log = append(p.log, beat{path: r.URL.Path, at: at})
		p.mu.Unlock()
		rec := &recorder{ResponseWriter: w}
		switch {
		case strings.HasSuffix(r.URL.Path, "/extend") && at >= p.from && at < p.to:
			problem(rec, 503, "urn:idem:problem:store-unavailable", "Retry-After", "1")
		case strings.HasSuffix(r.URL.Path, "/begin") && p.beginDelay > 0:
			buf := &bufferedWriter{header: http.Header{}}
			rp.ServeHTTP(buf, r)
			time.Sleep(p.beginDelay)
			buf.copyTo(rec)
		default:
			rp.ServeHTTP(rec, r)
		}
		p.mu.Lock()
		p.log[i].status = rec.status
		p.mu.Unlock()
	}))
	t.Cleanup(s.Close)
	return s
}

func (p *outageProxy) of(suffix string) []beat {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []beat
	for _, b := range p.log {
		if strings.HasSuffix(b.path, suffix) {
			out = append(out, b)
		}
	}
	return out
}

type recorder struct {
	http.ResponseWriter
	status int
}

func (r *recorder) WriteHeader(status int) {
	r.status = status
	r.ResponseWriter.WriteHeader(status)
}

func (r *recorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = 200
	}
	return r.ResponseWriter.Write(b)
}

type bufferedWriter struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (b *bufferedWriter) Header() http.Header         { return b.header }
func (b *bufferedWriter) Write(p []byte) (int, error) { return b.body.Write(p) }
func (b *bufferedWriter) WriteHeader(status int)      { b.status = status }
func (b *bufferedWriter) copyTo(w http.ResponseWriter) {
	for k, v := range b.header {
		w.Header()[k] = v
	}
	if b.status == 0 {
		b.status = 200
	}
	w.WriteHeader(b.status)
	_, _ = io.Copy(w, &b.body)
}

// A heartbeat across a 3 s store outage at the beat keeps its lease: a 6 s lease, 9 s of work;
// from just before the first beat is due (2 s after the begin was sent) and for 3 s, every extend
// is answered 503 with Retry-After: 1. The beat is tried again every 250 ms and gets through as
// soon as the outage ends, 1 s before the lease would have run out; the work completes, once.
func TestHeartbeatAcrossAStoreOutageKeepsTheLease(t *testing.T) {
	ctx, ns := ctxFor(t), namespace(t)
	p := &outageProxy{from: 1800 * time.Millisecond, to: 4800 * time.Millisecond}
	px := newOutageProxy(t, p)
	c := idem.New(px.URL, idem.WithRetries(2))
	var runs atomic.Int32
	res, err := c.Operations.Run(ctx, ns, idem.Key("k"), func(ctx context.Context) (any, error) {
		runs.Add(1)
		return work(9*time.Second, "done")(ctx)
	}, idem.WithLease(6*time.Second))
	if err != nil || string(res) != `"done"` || runs.Load() != 1 {
		t.Fatalf("%s %v, %d runs", res, err, runs.Load())
	}
	rec, err := client().Operations.Get(ctx, ns, idem.Key("k"))
	if err != nil || rec == nil || rec.Status != idem.StatusCompleted || string(rec.Result) != `"done"` {
		t.Fatalf("the server's record: %+v %v", rec, err)
	}

	beats := p.of("/extend")
	var refused []time.Duration
	var through []time.Duration
	for _, b := range beats {
		if b.status == 503 {
			refused = append(refused, b.at)
		}
		if b.status == 200 && b.at >= p.to {
			through = append(through, b.at)
		}
	}
	if len(refused) < 8 || refused[0] > 2500*time.Millisecond {
		t.Fatalf("the beat is due 2 s after the begin was sent and tried again every 250 ms: %+v", beats)
	}
	for i := 1; i < len(refused); i++ {
		if refused[i]-refused[i-1] > 700*time.Millisecond {
			t.Fatalf("no whole interval (nor Retry-After) between tries: %+v", beats)
		}
	}
	if len(through) < 2 || through[0] > p.to+700*time.Millisecond {
		t.Fatalf("the first beat after the outage gets through at once, and the beats go on: %+v", beats)
	}
}

// A 3 s lease whose begin's answer is held back 750 ms: the first beat is due 1 s after the begin
// was sent, not 1 s after its answer.
func TestHeartbeatLeaseCountsFromBeforeTheBegin(t *testing.T) {
	ctx, ns := ctxFor(t), namespace(t)
	p := &outageProxy{beginDelay: 750 * time.Millisecond}
	px := newOutageProxy(t, p)
	res, err := idem.New(px.URL).Operations.Run(ctx, ns, idem.Key("k"), work(1300*time.Millisecond, "ok"), idem.WithLease(3*time.Second))
	if err != nil || string(res) != `"ok"` {
		t.Fatalf("%s %v", res, err)
	}
	beats := p.of("/extend")
	if len(beats) == 0 || beats[0].at < 800*time.Millisecond || beats[0].at > 1450*time.Millisecond || beats[0].status != 200 {
		t.Fatalf("the first beat 1 s after the begin was sent: %+v", beats)
	}
}
