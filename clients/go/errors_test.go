package idem_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	idem "github.com/idem-dev/idem/clients/go"
)

// The server with [auth] tokens: no token or a wrong one is ErrUnauthorized, the right one works.
func TestUnauthorized(t *testing.T) {
	ctx := ctxFor(t)
	for _, token := range []string{"", "wrong-token"} {
		c := idem.New(authSrv.URL, idem.WithToken(token))
		_, err := c.Claims.Claim(ctx, "auth", idem.Key("k"))
		var e *idem.Error
		if !errors.Is(err, idem.ErrUnauthorized) || !errors.As(err, &e) || e.Status != 401 {
			t.Fatalf("token %q: want ErrUnauthorized, got %v", token, err)
		}
		if errors.Is(err, idem.ErrForbidden) || errors.Is(err, idem.ErrConnection) {
			t.Fatal("401 must match ErrUnauthorized only")
		}
		if strings.Contains(err.Error(), "wrong-token") {
			t.Fatal("the token must never appear in an error")
		}
		if e.Attempts != 1 {
			t.Fatalf("a 401 is never retried: %d attempts", e.Attempts)
		}
	}
	c := idem.New(authSrv.URL, idem.WithToken(authToken))
	r, err := c.Claims.Claim(ctx, "auth", idem.Key("k"))
	if err != nil || !r.Claimed {
		t.Fatalf("the right token: %+v %v", r, err)
	}
	if s := fmt.Sprint(c); strings.Contains(s, authToken) {
		t.Fatalf("the client prints its token: %s", s)
	}
	if page, err := c.Receipts.List(ctx, idem.ReceiptFilter{}); err != nil || page == nil {
		t.Fatalf("list with the token: %v", err)
	}
}

// fakeIdem answers with reply(n) for the n-th request (from 0) and counts requests.
func fakeIdem(t *testing.T, reply func(n int, w http.ResponseWriter, r *http.Request)) (*httptest.Server, *atomic.Int32) {
	var n atomic.Int32
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reply(int(n.Add(1)-1), w, r)
	}))
	t.Cleanup(s.Close)
	return s, &n
}

func problem(w http.ResponseWriter, status int, typ string, header ...string) {
	for i := 0; i+1 < len(header); i += 2 {
		w.Header().Set(header[i], header[i+1])
	}
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(status)
	fmt.Fprintf(w, `{"type":%q,"title":"T%d","status":%d,"detail":"d"}`, typ, status, status)
}

const claimed = `{"claimed":true,"namespace":"ns","id":"x","parts":["k"],"data":null,"created_at":"2026-01-01T00:00:00Z","expires_at":null}`

// 503 with Retry-After: 1, then 200: the client waits the second and succeeds.
func TestRetryHonoursRetryAfter(t *testing.T) {
	s, n := fakeIdem(t, func(i int, w http.ResponseWriter, r *http.Request) {
		if i == 0 {
			problem(w, 503, "urn:idem:problem:unavailable", "Retry-After", "1")
			return
		}
		w.WriteHeader(201)
		fmt.Fprint(w, claimed)
	})
	c := idem.New(s.URL, idem.WithBackoff(time.Millisecond, 5*time.Second))
	start := time.Now()
	r, err := c.Claims.Claim(context.Background(), "ns", idem.Key("k"))
	if err != nil || !r.Claimed {
		t.Fatalf("%+v %v", r, err)
	}
	if n.Load() != 2 {
		t.Fatalf("%d requests, want 2", n.Load())
	}
	if d := time.Since(start); d < 950*time.Millisecond || d > 3*time.Second {
		t.Fatalf("waited %s, want the Retry-After's second", d)
	}
}

// 502, 503 and 504 are retried with backoff, then the last answer is the error.
func TestRetryGivesUp(t *testing.T) {
	for _, status := range []int{502, 503, 504} {
		s, n := fakeIdem(t, func(i int, w http.ResponseWriter, r *http.Request) {
			problem(w, status, "about:blank")
		})
		c := idem.New(s.URL, idem.WithRetries(2), idem.WithBackoff(time.Millisecond, 10*time.Millisecond))
		_, err := c.Claims.Claim(context.Background(), "ns", idem.Key("k"))
		var e *idem.Error
		if !errors.As(err, &e) || e.Status != status || e.Attempts != 3 || n.Load() != 3 {
			t.Fatalf("%d: %v after %d requests", status, err, n.Load())
		}
		if errors.Is(err, idem.ErrUnavailable) != (status == 503) {
			t.Fatalf("%d: ErrUnavailable is for 503 only", status)
		}
	}
}

// Other statuses are never retried, and each matches its sentinel.
func TestNoRetryAndSentinels(t *testing.T) {
	cases := []struct {
		status int
		typ    string
		is     error
	}{
		{400, "urn:idem:problem:invalid-request", nil},
		{401, "urn:idem:problem:unauthorized", idem.ErrUnauthorized},
		{403, "urn:idem:problem:forbidden", idem.ErrForbidden},
		{404, "urn:idem:problem:not-found", idem.ErrNotFound},
		{404, idem.ProblemNoSuchRoute, idem.ErrNoRoute},
		{404, "about:blank", nil},
		{409, idem.ProblemInProgress, idem.ErrInProgress},
		{409, idem.ProblemLeaseLost, idem.ErrLeaseLost},
		{409, "urn:idem:problem:conflict", idem.ErrConflict},
		{422, idem.ProblemFingerprintMismatch, idem.ErrMismatch},
		{500, "urn:idem:problem:internal", nil},
	}
	all := []error{idem.ErrUnauthorized, idem.ErrForbidden, idem.ErrNotFound, idem.ErrNoRoute, idem.ErrInProgress, idem.ErrLeaseLost,
		idem.ErrMismatch, idem.ErrUnavailable, idem.ErrOutcomeUnknown, idem.ErrConnection}
	for _, tc := range cases {
		s, n := fakeIdem(t, func(i int, w http.ResponseWriter, r *http.Request) {
			problem(w, tc.status, tc.typ, "Retry-After", "0")
		})
		c := idem.New(s.URL, idem.WithBackoff(time.Millisecond, 10*time.Millisecond))
		_, err := c.Operations.Begin(context.Background(), "ns", idem.Key("k"))
		var e *idem.Error
		if !errors.As(err, &e) || e.Status != tc.status || e.Type != tc.typ || e.Title != fmt.Sprintf("T%d", tc.status) {
			t.Fatalf("%d %s: %#v", tc.status, tc.typ, err)
		}
		// A type that is not idem's: the answer does not look like idem, and says so.
		notIdem := !strings.HasPrefix(tc.typ, "urn:idem:problem:")
		if e.NotIdem != notIdem || errors.Is(err, idem.ErrNotIdem) != notIdem ||
			(!notIdem && e.Detail != "d") || (notIdem && !strings.HasSuffix(e.Detail, "(check the URL given to idem.New, or IDEM_URL) [its detail: d]")) {
			t.Fatalf("%d %s: NotIdem %v, Detail %q", tc.status, tc.typ, e.NotIdem, e.Detail)
		}
		if n.Load() != 1 {
			t.Fatalf("%d was retried: %d requests", tc.status, n.Load())
		}
		for _, s := range all {
			if errors.Is(err, s) != (s == tc.is) {
				t.Fatalf("%d %s: errors.Is(%v) = %v", tc.status, tc.typ, s, errors.Is(err, s))
			}
		}
		if errors.Is(err, idem.ErrConflict) != (tc.status == 409) {
			t.Fatalf("%d: ErrConflict is every 409", tc.status)
		}
	}
}

// A body that is not a problem (a proxy's HTML page) still gives an *Error with the status.
func TestNonProblemBody(t *testing.T) {
	s, _ := fakeIdem(t, func(i int, w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		w.WriteHeader(502)
		fmt.Fprint(w, "<html>bad gateway</html>")
	})
	c := idem.New(s.URL, idem.WithRetries(0))
	_, err := c.Claims.Get(context.Background(), "ns", idem.Key("k"))
	var e *idem.Error
	if !errors.As(err, &e) || e.Status != 502 || e.Type != "about:blank" || e.Title != "Bad Gateway" {
		t.Fatalf("%#v", err)
	}
}

// A Retry-After longer than the backoff's cap is not waited for: the error comes at once.
func TestRetryAfterTooLong(t *testing.T) {
	s, n := fakeIdem(t, func(i int, w http.ResponseWriter, r *http.Request) {
		problem(w, 503, "about:blank", "Retry-After", "120")
	})
	c := idem.New(s.URL, idem.WithBackoff(time.Millisecond, time.Second))
	start := time.Now()
	_, err := c.Claims.Claim(context.Background(), "ns", idem.Key("k"))
	var e *idem.Error
	if !errors.As(err, &e) || e.RetryAfter != 120*time.Second || n.Load() != 1 || time.Since(start) > time.Second {
		t.Fatalf("%v, %d requests, %s", err, n.Load(), time.Since(start))
	}
}

// No server: ErrConnection naming the address and cause, after every retry.
func TestConnectionRefused(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	c := idem.New("http://"+addr, idem.WithRetries(2), idem.WithBackoff(time.Millisecond, 10*time.Millisecond))
	_, err = c.Claims.Claim(context.Background(), "ns", idem.Key("k"))
	var e *idem.Error
	if !errors.Is(err, idem.ErrConnection) || !errors.As(err, &e) || e.Status != 0 || e.Attempts != 3 || e.Type != idem.ProblemConnection {
		t.Fatalf("%#v", err)
	}
	if msg := err.Error(); !strings.Contains(msg, "no answer from http://"+addr) || !strings.Contains(msg, "refused") ||
		!strings.HasSuffix(msg, "(3 attempts); is idem running there? To point the client elsewhere, give idem.New its URL or set IDEM_URL") {
		t.Fatalf("the message must name the address, the cause and how to look elsewhere: %s", msg)
	}
}

// A connection error, then an answer: retried.
func TestRetryAfterConnectionError(t *testing.T) {
	s, n := fakeIdem(t, func(i int, w http.ResponseWriter, r *http.Request) {
		if i == 0 {
			hj, _ := w.(http.Hijacker)
			conn, _, _ := hj.Hijack()
			conn.Close() // no answer at all
			return
		}
		w.WriteHeader(201)
		fmt.Fprint(w, claimed)
	})
	c := idem.New(s.URL, idem.WithBackoff(time.Millisecond, 10*time.Millisecond))
	if _, err := c.Claims.Claim(context.Background(), "ns", idem.Key("k")); err != nil || n.Load() != 2 {
		t.Fatalf("%v after %d requests", err, n.Load())
	}
}

// The per-attempt timeout: a server that never answers is a timeout after each attempt.
func TestTimeoutPerAttempt(t *testing.T) {
	block := make(chan struct{})
	s, n := fakeIdem(t, func(i int, w http.ResponseWriter, r *http.Request) {
		select {
		case <-block:
		case <-r.Context().Done():
		}
	})
	defer close(block)
	c := idem.New(s.URL, idem.WithTimeout(100*time.Millisecond), idem.WithRetries(1), idem.WithBackoff(time.Millisecond, 10*time.Millisecond))
	start := time.Now()
	_, err := c.Claims.Claim(context.Background(), "ns", idem.Key("k"))
	var e *idem.Error
	if !errors.As(err, &e) || e.Type != idem.ProblemTimeout || !errors.Is(err, idem.ErrConnection) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("%#v", err)
	}
	if n.Load() != 2 || time.Since(start) > 2*time.Second {
		t.Fatalf("%d attempts in %s", n.Load(), time.Since(start))
	}
}

// The caller's context ends the call at once, backoff included, and is in the error's chain.
func TestContextEndsRetries(t *testing.T) {
	s, _ := fakeIdem(t, func(i int, w http.ResponseWriter, r *http.Request) {
		problem(w, 503, "about:blank")
	})
	c := idem.New(s.URL, idem.WithRetries(10), idem.WithBackoff(time.Second, 10*time.Second))
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := c.Claims.Claim(ctx, "ns", idem.Key("k"))
	if !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > time.Second {
		t.Fatalf("%v after %s", err, time.Since(start))
	}
}

// The token goes in the Authorization header only; a base path is kept.
func TestRequestShape(t *testing.T) {
	var got *http.Request
	s, _ := fakeIdem(t, func(i int, w http.ResponseWriter, r *http.Request) {
		got = r.Clone(context.Background())
		w.WriteHeader(201)
		fmt.Fprint(w, claimed)
	})
	c := idem.New(s.URL+"/idem/", idem.WithToken("t0k"))
	if _, err := c.Claims.Claim(context.Background(), "my.ns", idem.Key("k")); err != nil {
		t.Fatal(err)
	}
	if got.URL.Path != "/idem/v1/claims/my.ns" || got.Header.Get("Authorization") != "Bearer t0k" || got.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("%s %v", got.URL, got.Header)
	}
	if _, err := idem.New("localhost:7070").Claims.Claim(context.Background(), "ns", idem.Key("k")); err == nil || !strings.Contains(err.Error(), "http://") {
		t.Fatalf("a URL without a scheme: %v", err)
	}
}
