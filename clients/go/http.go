package idem

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"
)

// transport sends one call to idem: a per-attempt timeout, retries with exponential backoff and
// jitter on connection errors and 502/503/504 (honouring Retry-After), and problem+json answers
// turned into *Error.
type transport struct {
	base      string
	err       error // a bad base URL, returned by every call
	token     string
	tokenSet  bool // WithToken was given: IDEM_TOKEN is not read
	timeout   time.Duration
	retries   int
	baseDelay time.Duration
	maxDelay  time.Duration
	http      *http.Client

	rngMu sync.Mutex
	rng   *rand.Rand
}

// request is one call: JSON (a value to marshal) or a raw body with its headers.
type request struct {
	method string
	path   string
	query  url.Values
	json   any
	raw    []byte
	header http.Header
	// extraTimeout is added to the per-attempt timeout (a begin the server may hold open).
	extraTimeout time.Duration
	// timeout, when not 0, is this call's per-attempt timeout instead of the client's (a
	// heartbeat's, at most a third of its lease).
	timeout time.Duration
	// once: a single attempt, no retries (a heartbeat tries again on a pace of its own).
	once bool
	// shape is what a 2xx answer's body must have: without it the answer is not idem's, and the
	// call returns the not-idem *Error naming the URL instead of reading it.
	shape *shape
}

type response struct {
	status int
	header http.Header
	body   []byte
}

// maxAnswerBytes bounds what is read of one answer: idem's largest (a page of 1000 receipts) is
// far smaller.
const maxAnswerBytes = 64 << 20

func (t *transport) do(ctx context.Context, req request) (*response, error) {
	if t.err != nil {
		return nil, t.err
	}
	var body []byte
	contentType := ""
	switch {
	case req.json != nil:
		b, err := json.Marshal(req.json)
		if err != nil {
			return nil, fmt.Errorf("idem: %s %s: the request body is not JSON: %w", req.method, req.path, err)
		}
		body, contentType = b, "application/json"
	case req.raw != nil:
		body = req.raw
	}
	u := t.base + req.path
	if len(req.query) > 0 {
		u += "?" + req.query.Encode()
	}
	retries := t.retries
	if req.once {
		retries = 0
	}
	for attempt := 0; ; attempt++ {
		status, header, answer, err := t.send(ctx, req, u, body, contentType)
		if err != nil {
			if ctx.Err() != nil {
				// The caller's context ended: no retry, and its error is in the chain.
				return nil, t.noAnswer(req, attempt+1, ctx.Err(), false)
			}
			timedOut := errors.Is(err, context.DeadlineExceeded)
			if attempt < retries {
				if serr := sleep(ctx, t.backoff(attempt)); serr != nil {
					return nil, t.noAnswer(req, attempt+1, serr, false)
				}
				continue
			}
			return nil, t.noAnswer(req, attempt+1, err, timedOut)
		}
		if status >= 200 && status < 300 {
			res := &response{status: status, header: header, body: answer}
			if req.shape != nil && !req.shape.fits(answer) {
				return nil, notIdemAnswer(req, t.base, res, req.shape.expected, attempt+1)
			}
			return res, nil
		}
		retryAfter, hasRetryAfter := parseRetryAfter(header.Get("Retry-After"), time.Now())
		if (status == 502 || status == 503 || status == 504) && attempt < retries {
			wait := t.backoff(attempt)
			if hasRetryAfter {
				wait = retryAfter
			}
			if wait <= t.maxDelay {
				if serr := sleep(ctx, wait); serr != nil {
					return nil, t.noAnswer(req, attempt+1, serr, false)
				}
				continue
			}
		}
		return nil, problemError(req, t.base, status, header, answer, retryAfter, attempt+1)
	}
}

// attemptTimeout is the time limit of one attempt of req.
func (t *transport) attemptTimeout(req request) time.Duration {
	if req.timeout > 0 {
		return req.timeout + req.extraTimeout
	}
	return t.timeout + req.extraTimeout
}

// send sends one attempt and reads the whole answer.
func (t *transport) send(ctx context.Context, req request, u string, body []byte, contentType string) (int, http.Header, []byte, error) {
	timeout := t.attemptTimeout(req)
	actx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	hr, err := http.NewRequestWithContext(actx, req.method, u, rd)
	if err != nil {
		return 0, nil, nil, err
	}
	for name, values := range req.header {
		hr.Header[name] = values
	}
	if contentType != "" {
		hr.Header.Set("Content-Type", contentType)
	}
	hr.Header.Set("Accept", "application/json, application/problem+json")
	if t.token != "" {
		hr.Header.Set("Authorization", "Bearer "+t.token)
	}
	res, err := t.http.Do(hr)
	if err != nil {
		return 0, nil, nil, err
	}
	defer res.Body.Close()
	answer, err := io.ReadAll(io.LimitReader(res.Body, maxAnswerBytes))
	if err != nil {
		return 0, nil, nil, err
	}
	return res.StatusCode, res.Header, answer, nil
}

func (t *transport) noAnswer(req request, attempts int, cause error, timedOut bool) *Error {
	e := &Error{Method: req.method, Path: req.path, Attempts: attempts, Err: cause, Type: ProblemConnection, Title: "no answer from " + t.base}
	switch {
	case timedOut:
		e.Type = ProblemTimeout
		e.Title = fmt.Sprintf("no answer from %s within %s", t.base, t.attemptTimeout(req))
	case !errors.Is(cause, context.Canceled) && !errors.Is(cause, context.DeadlineExceeded):
		// Not the caller's own context: idem is not there, or not at that address.
		e.Detail = "is idem running there? To point the client elsewhere, give idem.New its URL or set IDEM_URL"
	}
	return e
}

// problemError builds the *Error of an error answer from its problem+json body (or, for a body
// that is not one, from the status alone). An answer that is not an idem problem document says
// that base does not look like idem.
func problemError(req request, base string, status int, header http.Header, body []byte, retryAfter time.Duration, attempts int) *Error {
	e := &Error{Status: status, Type: "about:blank", Title: http.StatusText(status), RetryAfter: retryAfter,
		Method: req.method, Path: req.path, Attempts: attempts}
	var p struct {
		Type   *string `json:"type"`
		Title  *string `json:"title"`
		Detail *string `json:"detail"`
		Field  *string `json:"field"`
	}
	ct := header.Get("Content-Type")
	if len(body) > 0 && (ct == "" || strings.Contains(ct, "json")) && json.Unmarshal(body, &p) == nil {
		set := func(dst *string, v *string) {
			if v != nil {
				*dst = *v
			}
		}
		set(&e.Type, p.Type)
		set(&e.Title, p.Title)
		set(&e.Detail, p.Detail)
		set(&e.Field, p.Field)
	} else {
		e.Detail = fmt.Sprintf("answered %d", status)
	}
	if e.Title == "" {
		e.Title = fmt.Sprintf("HTTP %d", status)
	}
	if !isIdemProblem(ct, p.Type) {
		theirs := ""
		if p.Detail != nil && *p.Detail != "" {
			theirs = fmt.Sprintf(" [its detail: %s]", *p.Detail)
		}
		e.NotIdem = true
		e.Detail = fmt.Sprintf("%s answered %d without an idem problem document: it does not look like idem "+
			"(check the URL given to idem.New, or IDEM_URL)%s", base, status, theirs)
	}
	return e
}

// isIdemProblem reports whether an error answer is idem's own: application/problem+json whose
// type is one of idem's (urn:idem:problem:…). Anything else (a web server's 404 page, a proxy's
// error) comes from something that is not idem.
func isIdemProblem(contentType string, typ *string) bool {
	ct := strings.ToLower(strings.TrimSpace(contentType))
	return strings.HasPrefix(ct, "application/problem+json") && typ != nil && strings.HasPrefix(*typ, "urn:idem:problem:")
}

// parseRetryAfter reads delta-seconds or an HTTP date.
func parseRetryAfter(v string, now time.Time) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	if n, err := strconv.ParseUint(v, 10, 32); err == nil {
		return time.Duration(n) * time.Second, true
	}
	if at, err := http.ParseTime(v); err == nil {
		d := at.Sub(now)
		if d < 0 {
			d = 0
		}
		return d, true
	}
	return 0, false
}

// decode unmarshals an answer into v, naming the call when it does not fit.
func decode(req request, res *response, v any) error {
	if err := json.Unmarshal(res.body, v); err != nil {
		return fmt.Errorf("idem: %s %s: an answer the client cannot read (%d bytes): %w", req.method, req.path, len(res.body), err)
	}
	return nil
}

// call sends req and decodes a JSON answer into out (if not nil).
func (t *transport) call(ctx context.Context, req request, out any) error {
	res, err := t.do(ctx, req)
	if err != nil {
		return err
	}
	if out == nil {
		return nil
	}
	return decode(req, res, out)
}

// seg escapes one path segment.
func seg(s string) string { return url.PathEscape(s) }
