package idem_test

// Client tokens: one per logical call, the same on each of its retries. First against an httptest
// server that answers each call's first attempt 503 outcome-unknown and records every body; then
// against the real idem serve of TestMain, through a transport that loses the first answer on the
// way back (the request reached idem, which made the write; the client saw a broken connection).

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	idem "github.com/idem-dev/idem/clients/go"
)

var uuidV4 = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)

// bodies records the JSON bodies a fake idem received, in order.
type bodies struct {
	mu   sync.Mutex
	list []map[string]any
}

func (b *bodies) add(t *testing.T, r *http.Request) map[string]any {
	var m map[string]any
	if err := json.NewDecoder(r.Body).Decode(&m); err != nil {
		t.Errorf("%s %s: a body that is not JSON: %v", r.Method, r.URL.Path, err)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.list = append(b.list, m)
	return m
}

// tokens are the client_token of every body received (nil where there was none).
func (b *bodies) tokens() []any {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([]any, len(b.list))
	for i, m := range b.list {
		out[i] = m["client_token"]
	}
	return out
}

func outcomeUnknown(w http.ResponseWriter) {
	problem(w, 503, idem.ProblemOutcomeUnknown, "Retry-After", "0")
}

const startedAnswer = `{"status":"started","id":"x","token":"lease-1","lease_expires_at":"2030-01-01T00:00:00Z","fence":17}`

// firstLost answers every even request (each call's first attempt) 503 outcome-unknown and the
// others as idem would.
func firstLost(t *testing.T) (*idem.Client, *bodies) {
	got := &bodies{}
	s, _ := fakeIdem(t, func(n int, w http.ResponseWriter, r *http.Request) {
		body := got.add(t, r)
		if n%2 == 0 {
			outcomeUnknown(w)
			return
		}
		switch {
		case strings.HasSuffix(r.URL.Path, "/begin"):
			w.WriteHeader(201)
			fmt.Fprint(w, startedAnswer)
		case strings.HasSuffix(r.URL.Path, "/complete"):
			fmt.Fprintf(w, `{"status":"completed","id":"x","result":%s}`, mustJSON(body["result"]))
		case strings.HasSuffix(r.URL.Path, "/batch"):
			items, _ := body["items"].([]any)
			fmt.Fprint(w, `{"results":[`+strings.TrimSuffix(strings.Repeat(claimed+",", len(items)), ",")+`]}`)
		default:
			w.WriteHeader(201)
			fmt.Fprint(w, claimed)
		}
	})
	return idem.New(s.URL, idem.WithBackoff(time.Millisecond, time.Second)), got
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// retriedWithTheSameToken: two logical calls, each sent twice, carried a, a, b, b with a != b.
func retriedWithTheSameToken(t *testing.T, tokens []any) {
	t.Helper()
	if len(tokens) != 4 {
		t.Fatalf("%d requests, want 4: %v", len(tokens), tokens)
	}
	a, _ := tokens[0].(string)
	b, _ := tokens[2].(string)
	if !uuidV4.MatchString(a) || !uuidV4.MatchString(b) {
		t.Fatalf("tokens must be UUID v4: %v", tokens)
	}
	if tokens[1] != a || tokens[3] != b {
		t.Fatalf("a retry must carry its first attempt's token: %v", tokens)
	}
	if a == b {
		t.Fatalf("two logical calls must carry two tokens: %v", tokens)
	}
}

// A retry after 503 outcome-unknown carries the very token of the first attempt, for Claim,
// ClaimBatch and Begin; two calls carry two tokens; Begin's answer has its Fence.
func TestClientTokenSameOnRetry(t *testing.T) {
	ctx := context.Background()
	t.Run("Claim", func(t *testing.T) {
		c, got := firstLost(t)
		for i := 0; i < 2; i++ {
			if r, err := c.Claims.Claim(ctx, "ns", idem.Key("k")); err != nil || !r.Claimed {
				t.Fatalf("%+v %v", r, err)
			}
		}
		retriedWithTheSameToken(t, got.tokens())
		if mustJSON(got.list[1]) != mustJSON(got.list[0]) {
			t.Fatalf("the retry must be the same request: %v then %v", got.list[0], got.list[1])
		}
	})
	t.Run("ClaimBatch", func(t *testing.T) {
		c, got := firstLost(t)
		for i := 0; i < 2; i++ {
			if rs, err := c.Claims.ClaimBatch(ctx, "ns", []idem.Item{{Key: "a"}, {Key: "b"}}); err != nil || len(rs) != 2 {
				t.Fatalf("%+v %v", rs, err)
			}
		}
		retriedWithTheSameToken(t, got.tokens())
		for _, b := range got.list {
			for _, it := range b["items"].([]any) {
				if _, has := it.(map[string]any)["client_token"]; has {
					t.Fatal("one token for the batch: its items carry none of their own")
				}
			}
		}
	})
	t.Run("Begin", func(t *testing.T) {
		c, got := firstLost(t)
		for i := 0; i < 2; i++ {
			op, err := c.Operations.Begin(ctx, "ns", idem.Key("k"))
			if err != nil || !op.Started() || op.Token != "lease-1" || op.Fence != 17 {
				t.Fatalf("%+v %v", op, err)
			}
		}
		retriedWithTheSameToken(t, got.tokens())
	})
}

// Every begin of one Run carries one token: the transport's retry after 503 outcome-unknown, and
// the begin after a 409 in-progress. Another Run, another token.
func TestRunSendsOneClientToken(t *testing.T) {
	got := &bodies{}
	var mu sync.Mutex
	begins := 0
	s, _ := fakeIdem(t, func(n int, w http.ResponseWriter, r *http.Request) {
		body := got.add(t, r)
		if strings.HasSuffix(r.URL.Path, "/complete") {
			fmt.Fprintf(w, `{"status":"completed","id":"x","result":%s}`, mustJSON(body["result"]))
			return
		}
		mu.Lock()
		i := begins
		begins++
		mu.Unlock()
		switch i {
		case 0:
			outcomeUnknown(w)
		case 1:
			problem(w, 409, idem.ProblemInProgress, "Retry-After", "0")
		default:
			w.WriteHeader(201)
			fmt.Fprint(w, startedAnswer)
		}
	})
	c := idem.New(s.URL, idem.WithBackoff(time.Millisecond, time.Second))
	fn := func(context.Context) (any, error) { return "done", nil }
	if res, err := c.Operations.Run(context.Background(), "ns", idem.Key("k"), fn, idem.WithWait(5*time.Second)); err != nil || string(res) != `"done"` {
		t.Fatalf("%s %v", res, err)
	}
	tokens := got.tokens() // begin, begin, begin, complete
	first, _ := tokens[0].(string)
	if len(tokens) != 4 || !uuidV4.MatchString(first) || tokens[1] != first || tokens[2] != first || tokens[3] != nil {
		t.Fatalf("one token for every begin of one Run, none for complete: %v", tokens)
	}
	if _, err := c.Operations.Run(context.Background(), "ns", idem.Key("k"), fn); err != nil {
		t.Fatal(err)
	}
	if next := got.tokens()[4]; next == first || !uuidV4.MatchString(fmt.Sprint(next)) {
		t.Fatalf("another Run must carry another token: %v then %v", first, next)
	}
}

// A caller's own token is sent as given, on every attempt; one idem would refuse is an error
// before anything is sent; calls that take none refuse the option.
func TestWithClientToken(t *testing.T) {
	ctx := context.Background()
	c, got := firstLost(t)
	if _, err := c.Claims.Claim(ctx, "ns", idem.Key("k"), idem.WithClientToken("order-7/attempt")); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Claims.ClaimBatch(ctx, "ns", []idem.Item{{Key: "a"}}, idem.WithClientToken("batch 7")); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Operations.Begin(ctx, "ns", idem.Key("k"), idem.WithClientToken("begin-7")); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Operations.Run(ctx, "ns", idem.Key("k"), func(context.Context) (any, error) { return 1, nil }, idem.WithClientToken("run-7")); err != nil {
		t.Fatal(err)
	}
	want := "[order-7/attempt order-7/attempt batch 7 batch 7 begin-7 begin-7 run-7 run-7]"
	if tokens := fmt.Sprint(got.tokens()[:8]); tokens != want {
		t.Fatalf("tokens %s, want %s", tokens, want)
	}
	sent := len(got.tokens())
	for _, bad := range []string{"", "naïve", "tab\there", strings.Repeat("x", 256)} {
		opt := idem.WithClientToken(bad)
		errs := []error{}
		_, err := c.Claims.Claim(ctx, "ns", idem.Key("k"), opt)
		errs = append(errs, err)
		_, err = c.Claims.ClaimBatch(ctx, "ns", []idem.Item{{Key: "k"}}, opt)
		errs = append(errs, err)
		_, err = c.Operations.Begin(ctx, "ns", idem.Key("k"), opt)
		errs = append(errs, err)
		_, err = c.Operations.Run(ctx, "ns", idem.Key("k"), func(context.Context) (any, error) { return 1, nil }, opt)
		errs = append(errs, err)
		for _, err := range errs {
			if err == nil || !strings.Contains(err.Error(), "client token") {
				t.Fatalf("%q: want an error about the client token, got %v", bad, err)
			}
		}
	}
	if _, err := c.Claims.ClaimBatch(ctx, "ns", []idem.Item{{Key: "k"}}, idem.WithData(1)); err == nil {
		t.Fatal("ClaimBatch takes WithClientToken only")
	}
	if len(got.tokens()) != sent {
		t.Fatal("a refused option must send nothing")
	}
}

// A 503 outcome-unknown after every retry is ErrUnavailable and ErrOutcomeUnknown, its Type
// saying so; a store-unavailable 503 is not ErrOutcomeUnknown.
func TestOutcomeUnknownIsUnavailable(t *testing.T) {
	got := &bodies{}
	s, n := fakeIdem(t, func(_ int, w http.ResponseWriter, r *http.Request) {
		got.add(t, r)
		outcomeUnknown(w)
	})
	c := idem.New(s.URL, idem.WithRetries(2), idem.WithBackoff(time.Millisecond, time.Second))
	_, err := c.Claims.Claim(context.Background(), "ns", idem.Key("k"))
	var e *idem.Error
	if !errors.Is(err, idem.ErrUnavailable) || !errors.Is(err, idem.ErrOutcomeUnknown) || !errors.As(err, &e) || e.Type != idem.ProblemOutcomeUnknown || e.Status != 503 {
		t.Fatalf("%#v", err)
	}
	if n.Load() != 3 || e.Attempts != 3 {
		t.Fatalf("%d requests, %d attempts: a 503 outcome-unknown is retried", n.Load(), e.Attempts)
	}
	tokens := got.tokens()
	if tokens[0] != tokens[1] || tokens[1] != tokens[2] {
		t.Fatalf("every attempt of one call carries one token: %v", tokens)
	}
	s2, _ := fakeIdem(t, func(_ int, w http.ResponseWriter, r *http.Request) {
		problem(w, 503, idem.ProblemStoreUnavailable)
	})
	_, err = idem.New(s2.URL, idem.WithRetries(0)).Claims.Claim(context.Background(), "ns", idem.Key("k"))
	if !errors.Is(err, idem.ErrUnavailable) || errors.Is(err, idem.ErrOutcomeUnknown) {
		t.Fatalf("store-unavailable: %v", err)
	}
}

func TestNewClientToken(t *testing.T) {
	seen := map[string]bool{}
	for i := 0; i < 1000; i++ {
		tok, err := idem.NewClientToken()
		if err != nil || !uuidV4.MatchString(tok) || seen[tok] {
			t.Fatalf("%q %v (seen: %v)", tok, err, seen[tok])
		}
		seen[tok] = true
	}
}

// losingTransport sends each request to the real server but loses its first `lose` answers on
// the way back: idem got the request and answered; the client sees a broken connection.
type losingTransport struct {
	lose int

	mu   sync.Mutex
	sent []map[string]any
	lost [][]byte // the lost answers' bodies
}

func (l *losingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return nil, err
	}
	r.Body.Close()
	var m map[string]any
	_ = json.Unmarshal(body, &m)
	l.mu.Lock()
	l.sent = append(l.sent, m)
	l.mu.Unlock()
	fwd := r.Clone(r.Context())
	fwd.Body = io.NopCloser(bytes.NewReader(body))
	res, err := http.DefaultTransport.RoundTrip(fwd)
	if err != nil {
		return nil, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.lost) >= l.lose {
		return res, nil
	}
	answer, _ := io.ReadAll(res.Body)
	res.Body.Close()
	l.lost = append(l.lost, answer)
	return nil, errors.New("connection reset: the answer was lost on the way back")
}

func lossyClient(l *losingTransport) *idem.Client {
	return idem.New(srv.URL, idem.WithHTTPClient(&http.Client{Transport: l}), idem.WithRetries(1),
		idem.WithBackoff(time.Millisecond, time.Second))
}

// Against the real server: a claim whose answer was lost is told Claimed on its retry (the same
// token); another call of the key is not.
func TestClaimWhoseAnswerWasLost(t *testing.T) {
	ctx, ns := ctxFor(t), namespace(t)
	l := &losingTransport{lose: 1}
	r, err := lossyClient(l).Claims.Claim(ctx, ns, idem.Key("lost-answer"), idem.WithData(1))
	if err != nil {
		t.Fatal(err)
	}
	var first idem.ClaimResult
	if len(l.lost) != 1 || json.Unmarshal(l.lost[0], &first) != nil || !first.Claimed {
		t.Fatalf("the first attempt must have made the claim: %s", l.lost)
	}
	if !r.Claimed || r.Record.ID != first.Record.ID || !r.Record.CreatedAt.Equal(first.Record.CreatedAt) {
		t.Fatalf("the retry must be told it won: %+v (lost: %+v)", r, first)
	}
	if len(l.sent) != 2 || l.sent[0]["client_token"] != l.sent[1]["client_token"] {
		t.Fatalf("the retry must carry the first token: %v", l.sent)
	}
	if again, err := client().Claims.Claim(ctx, ns, idem.Key("lost-answer")); err != nil || again.Claimed {
		t.Fatalf("another call must not win: %+v %v", again, err)
	}
}

// Against the real server: the same WithClientToken is Claimed again, another or none is not; a
// batch retried with its token is told each item as first decided.
func TestClaimWithClientToken(t *testing.T) {
	ctx, c, ns := ctxFor(t), client(), namespace(t)
	claim := func(opts ...idem.CallOption) bool {
		t.Helper()
		r, err := c.Claims.Claim(ctx, ns, idem.Key("k"), opts...)
		if err != nil {
			t.Fatal(err)
		}
		return r.Claimed
	}
	if got := []bool{claim(idem.WithClientToken("c7a1e5f0-retry")), claim(idem.WithClientToken("c7a1e5f0-retry")),
		claim(idem.WithClientToken("someone-else")), claim()}; fmt.Sprint(got) != "[true true false false]" {
		t.Fatalf("claimed %v, want [true true false false]", got)
	}

	if _, err := c.Claims.Claim(ctx, ns, idem.Key("old")); err != nil {
		t.Fatal(err)
	}
	items := []idem.Item{{Key: "b-1"}, {Key: "old"}, {Key: "b-1"}, {Key: "b-2"}}
	batch := func(opts ...idem.CallOption) string {
		t.Helper()
		rs, err := c.Claims.ClaimBatch(ctx, ns, items, opts...)
		if err != nil {
			t.Fatal(err)
		}
		var out []bool
		for _, r := range rs {
			out = append(out, r.Claimed)
		}
		return fmt.Sprint(out)
	}
	for i, want := range []struct {
		opts []idem.CallOption
		want string
	}{
		{[]idem.CallOption{idem.WithClientToken("batch-1")}, "[true false false true]"},
		{[]idem.CallOption{idem.WithClientToken("batch-1")}, "[true false false true]"},
		{[]idem.CallOption{idem.WithClientToken("batch-2")}, "[false false false false]"},
		{nil, "[false false false false]"},
	} {
		if got := batch(want.opts...); got != want.want {
			t.Fatalf("batch %d: claimed %s, want %s", i, got, want.want)
		}
	}
}

// Against the real server: a begin whose answer was lost gets its lease back on the retry (the
// same Token and Fence); Begin with WithClientToken gets the same lease again; the next holder of
// the key a greater Fence; Run whose begin's answer was lost runs fn once.
func TestBeginWhoseAnswerWasLost(t *testing.T) {
	ctx, c, ns := ctxFor(t), client(), namespace(t)
	l := &losingTransport{lose: 1}
	op, err := lossyClient(l).Operations.Begin(ctx, ns, idem.Key("lost"), idem.WithRequest(map[string]int{"n": 1}))
	if err != nil {
		t.Fatal(err)
	}
	var first idem.Operation
	if len(l.lost) != 1 || json.Unmarshal(l.lost[0], &first) != nil || !first.Started() {
		t.Fatalf("the first attempt must have taken the key: %s", l.lost)
	}
	if !op.Started() || op.Token != first.Token || op.Fence != first.Fence || op.Fence == 0 {
		t.Fatalf("the retry must get the lease back: %+v (lost: %+v)", op, first)
	}
	if l.sent[0]["client_token"] != l.sent[1]["client_token"] {
		t.Fatalf("the retry must carry the first token: %v", l.sent)
	}
	if _, err := c.Operations.Begin(ctx, ns, idem.Key("lost"), idem.WithRequest(map[string]int{"n": 1})); !errors.Is(err, idem.ErrInProgress) {
		t.Fatalf("another call: want ErrInProgress, got %v", err)
	}
	if _, err := c.Operations.Complete(ctx, ns, op.ID, op.Token, "done"); err != nil {
		t.Fatal(err)
	}

	mine := idem.WithClientToken("worker-7/job-42")
	a, err := c.Operations.Begin(ctx, ns, idem.Key("mine"), mine)
	if err != nil {
		t.Fatal(err)
	}
	// The retry gets the same token and fence; its lease is renewed from its own ask, never shortened.
	b, err := c.Operations.Begin(ctx, ns, idem.Key("mine"), mine)
	if err != nil || !b.Started() || b.Token != a.Token || b.Fence != a.Fence || b.LeaseExpiresAt.Before(*a.LeaseExpiresAt) {
		t.Fatalf("the same token must get the same lease: %+v then %+v, %v", a, b, err)
	}
	if _, err := c.Operations.Begin(ctx, ns, idem.Key("mine"), idem.WithClientToken("worker-8")); !errors.Is(err, idem.ErrInProgress) {
		t.Fatalf("another token: want ErrInProgress, got %v", err)
	}
	if err := c.Operations.Release(ctx, ns, a.ID, a.Token); err != nil {
		t.Fatal(err)
	}
	next, err := c.Operations.Begin(ctx, ns, idem.Key("mine"), idem.WithClientToken("worker-8"))
	if err != nil || !next.Started() || next.Fence <= a.Fence {
		t.Fatalf("the next holder must get a greater fence than %d: %+v %v", a.Fence, next, err)
	}
	if _, err := c.Operations.Complete(ctx, ns, next.ID, next.Token, 1); err != nil {
		t.Fatal(err)
	}
	if done, err := c.Operations.Begin(ctx, ns, idem.Key("mine"), mine); err != nil || !done.Completed() || done.Fence != 0 {
		t.Fatalf("completed is never started again: %+v %v", done, err)
	}

	l = &losingTransport{lose: 1}
	runs := 0
	res, err := lossyClient(l).Operations.Run(ctx, ns, idem.Key("run-lost"), func(context.Context) (any, error) {
		runs++
		return runs, nil
	}, idem.WithWait(5*time.Second))
	if err != nil || string(res) != "1" || runs != 1 {
		t.Fatalf("%s %v, %d runs", res, err, runs)
	}
	if v, err := c.Operations.Get(ctx, ns, idem.Key("run-lost")); err != nil || v == nil || !v.Completed() {
		t.Fatalf("%+v %v", v, err)
	}
}
