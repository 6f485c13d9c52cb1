package idem

import (
	"context"
	"fmt"
	"math/rand"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"
)

// DefaultURL is where a client looks for idem when New is given no URL and IDEM_URL is unset.
const DefaultURL = "http://127.0.0.1:7070"

// Client talks to one idem server. Make one with New and share it: it is safe for concurrent use.
type Client struct {
	// Claims: atomic first-writer-wins records (docs/reference/api.md#claims).
	Claims *Claims
	// Operations: begin / complete / release / extend, and Run (docs/reference/api.md#operations).
	Operations *Operations
	// Receipts: what became of inbound events; dead letters and replay (docs/reference/api.md#events
	// and #dead-letters-and-retention).
	Receipts *Receipts
	// Events: event intake, POST /v1/sources/{name}/events (docs/reference/api.md#events).
	Events *Events

	t *transport
}

// Option configures a Client (see New).
type Option func(*transport)

// WithToken sends Authorization: Bearer <token> on every call. An empty token sends none, even
// when IDEM_TOKEN is set. Without WithToken, the client sends the IDEM_TOKEN environment variable,
// if set. The token never appears in an error or a log line of the client.
func WithToken(token string) Option {
	return func(t *transport) { t.token, t.tokenSet = token, true }
}

// WithTimeout is the time limit of each HTTP attempt (default 30 s); a Begin that asks the server
// to wait gets that wait added. The context's deadline bounds the whole call, retries included.
func WithTimeout(d time.Duration) Option {
	return func(t *transport) { t.timeout = d }
}

// WithRetries is how many times a call is retried after the first attempt on connection errors,
// per-attempt timeouts and 502/503/504 (default 3; 0 turns retries off).
func WithRetries(n int) Option {
	return func(t *transport) { t.retries = n }
}

// WithBackoff sets the wait before retry n (0-based): a random time between half and all of
// base·2ⁿ, at most max (defaults 200 ms and 30 s). A Retry-After is waited for as given when it
// is at most max; a longer one is not waited for: the error is returned at once.
func WithBackoff(base, max time.Duration) Option {
	return func(t *transport) { t.baseDelay, t.maxDelay = base, max }
}

// WithHTTPClient sets the *http.Client used (default: one of the client's own, with the
// standard transport). Its Timeout, if any, applies on top of WithTimeout.
func WithHTTPClient(hc *http.Client) Option {
	return func(t *transport) { t.http = hc }
}

// New makes a client of the idem server at baseURL, e.g. "http://127.0.0.1:7070" (a base path is
// kept: "https://host/idem"); "" is the IDEM_URL environment variable, else DefaultURL. A baseURL
// that is not an http:// or https:// URL makes every call return an error saying so. Without
// WithToken, the IDEM_TOKEN environment variable, if set, is the token.
func New(baseURL string, opts ...Option) *Client {
	from := ""
	if baseURL == "" {
		baseURL, from = os.Getenv("IDEM_URL"), " (IDEM_URL)"
		if baseURL == "" {
			baseURL, from = DefaultURL, ""
		}
	}
	t := &transport{
		timeout:   30 * time.Second,
		retries:   3,
		baseDelay: 200 * time.Millisecond,
		maxDelay:  30 * time.Second,
		http:      &http.Client{},
		rng:       rand.New(rand.NewSource(time.Now().UnixNano())),
	}
	u, err := url.Parse(strings.TrimRight(baseURL, "/"))
	switch {
	case err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "":
		t.err = fmt.Errorf("idem: the server URL%s must be http:// or https:// and name a host, not %q", from, baseURL)
	default:
		t.base = u.String()
	}
	for _, o := range opts {
		o(t)
	}
	if !t.tokenSet {
		t.token = os.Getenv("IDEM_TOKEN")
	}
	return &Client{
		Claims:     &Claims{t: t},
		Operations: &Operations{t: t},
		Receipts:   &Receipts{t: t},
		Events:     &Events{t: t},
		t:          t,
	}
}

// String names the server, never the token.
func (c *Client) String() string {
	if c.t.token != "" {
		return fmt.Sprintf("idem.Client(%s, with a token)", c.t.base)
	}
	return fmt.Sprintf("idem.Client(%s)", c.t.base)
}

// backoff is the wait before retry attempt (0-based): between half and all of base·2^attempt,
// capped at maxDelay.
func (t *transport) backoff(attempt int) time.Duration {
	if t.baseDelay <= 0 {
		return 0
	}
	if attempt > 30 {
		attempt = 30
	}
	d := t.baseDelay << uint(attempt)
	if d > t.maxDelay || d <= 0 {
		d = t.maxDelay
	}
	t.rngMu.Lock()
	f := t.rng.Float64()
	t.rngMu.Unlock()
	return d/2 + time.Duration(f*float64(d/2))
}

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
