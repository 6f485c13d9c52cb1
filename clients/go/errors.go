package idem

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"
)

// Problem types idem answers with that the client gives a sentinel of their own.
const (
	ProblemInProgress          = "urn:idem:problem:in-progress"
	ProblemLeaseLost           = "urn:idem:problem:lease-lost"
	ProblemFingerprintMismatch = "urn:idem:problem:fingerprint-mismatch"
	// ProblemStoreUnavailable is a 503 (ErrUnavailable): the store could not be used; nothing was
	// changed.
	ProblemStoreUnavailable = "urn:idem:problem:store-unavailable"
	// ProblemOutcomeUnknown is a 503 (ErrUnavailable and ErrOutcomeUnknown): the store's answer
	// was lost after a write was sent, so it may or may not have been made. The client retries it
	// with the call's own client token, which tells which; this type reaches the caller only once
	// the retries ran out.
	ProblemOutcomeUnknown = "urn:idem:problem:outcome-unknown"
	// ProblemNotFound is idem's "no such record": the only 404 that Get and Delete read as absent.
	ProblemNotFound = "urn:idem:problem:not-found"
	// ProblemNoSuchRoute is a 404 for a path that is no route at all: a wrong base URL.
	ProblemNoSuchRoute = "urn:idem:problem:no-such-route"
	// ProblemConnection and ProblemTimeout are the Type of an *Error that never got an answer.
	ProblemConnection = "urn:idem:client:connection-error"
	ProblemTimeout    = "urn:idem:client:timeout"
)

// Sentinels to test an error against with errors.Is. An *Error matches every sentinel that fits
// it: a 409 in-progress answer is both ErrInProgress and ErrConflict.
var (
	// ErrInProgress: 409 urn:idem:problem:in-progress, another caller holds the operation's key.
	ErrInProgress = errors.New("idem: in progress")
	// ErrLeaseLost: 409 urn:idem:problem:lease-lost, the token no longer holds the key (its lease
	// ran out, or it was completed or released). The result was not stored.
	ErrLeaseLost = errors.New("idem: lease lost")
	// ErrConflict: any 409 (in progress, lease lost, an event id resent with another body, a
	// replay of a receipt still being delivered, a discard of a receipt that is not dead).
	ErrConflict = errors.New("idem: conflict")
	// ErrMismatch: 422, the key was used before with another request.
	ErrMismatch = errors.New("idem: fingerprint mismatch")
	// ErrUnavailable: 503, the store cannot be written right now (after the client's retries):
	// nothing was changed (ProblemStoreUnavailable), or the outcome is unknown
	// (ProblemOutcomeUnknown, which matches ErrOutcomeUnknown too).
	ErrUnavailable = errors.New("idem: unavailable")
	// ErrOutcomeUnknown: 503 urn:idem:problem:outcome-unknown, the write may or may not have been
	// made. Ask again with the same WithClientToken to learn which: a claim that was made answers
	// Claimed, a begin that took the key its lease.
	ErrOutcomeUnknown = errors.New("idem: outcome unknown")
	// ErrUnauthorized: 401, no token or a wrong one (see WithToken); for event intake with
	// verify_secret, a bad signature.
	ErrUnauthorized = errors.New("idem: unauthorized")
	// ErrForbidden: 403, the token may not do this.
	ErrForbidden = errors.New("idem: forbidden")
	// ErrNotFound: 404 urn:idem:problem:not-found, no such record, where the call has no "absent"
	// answer of its own (Get answers nil, nil and Delete false instead).
	ErrNotFound = errors.New("idem: not found")
	// ErrNoRoute: 404 urn:idem:problem:no-such-route, a path that is no route at all (the base URL
	// passed to New is wrong). Never read as "absent": Get and Delete return it. A 404 that is not
	// idem's (a proxy's page) matches neither this nor ErrNotFound, and is returned too.
	ErrNoRoute = errors.New("idem: no such route")
	// ErrConnection: no answer at all (connection refused or reset, or the per-attempt timeout),
	// on every attempt. Status is 0.
	ErrConnection = errors.New("idem: no answer")
	// ErrNotIdem: an error answer that is not an idem problem document (application/problem+json
	// with a urn:idem:problem: type), such as another web server's 404 page or a proxy's error:
	// the URL given to New (or IDEM_URL) does not look like idem. The *Error still has the
	// answer's Status and matches the sentinels of that status.
	ErrNotIdem = errors.New("idem: does not look like idem")
)

// Error is an error answer from idem: the RFC 9457 problem's members, or, with Status 0, a call
// that got no answer at all (Err is then the last cause, such as a *net.OpError or
// context.DeadlineExceeded).
type Error struct {
	// Status is the HTTP status, 0 when no answer came.
	Status int
	// Type is the problem type URI, e.g. urn:idem:problem:invalid-request; "about:blank" when the
	// body was not a problem (a proxy's HTML page).
	Type   string
	Title  string
	Detail string
	// Field is, for an invalid request, the field at fault: parts[0], items[3].parts[0].
	Field string
	// RetryAfter is the answer's Retry-After header, 0 when it had none.
	RetryAfter time.Duration
	// Method and Path name the call, e.g. "POST" "/v1/claims/survey".
	Method, Path string
	// Attempts is how many times the call was sent.
	Attempts int
	// NotIdem is true when the answer was not an idem problem document (see ErrNotIdem); Detail
	// then says so.
	NotIdem bool
	// Err is the cause when no answer came.
	Err error
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("idem: ")
	if e.Method != "" {
		fmt.Fprintf(&b, "%s %s: ", e.Method, e.Path)
	}
	if e.Status == 0 {
		b.WriteString(e.Title)
		if e.Err != nil {
			cause := e.Err
			var ue *url.Error
			if errors.As(cause, &ue) {
				cause = ue.Err // the method and URL are said already
			}
			fmt.Fprintf(&b, ": %v", cause)
		}
		if e.Attempts > 1 {
			fmt.Fprintf(&b, " (%d attempts)", e.Attempts)
		}
		if e.Detail != "" {
			fmt.Fprintf(&b, "; %s", e.Detail)
		}
		return b.String()
	}
	fmt.Fprintf(&b, "%d %s", e.Status, e.Title)
	if e.Detail != "" {
		fmt.Fprintf(&b, ": %s", e.Detail)
	}
	if e.Field != "" && !strings.Contains(e.Detail, e.Field) {
		fmt.Fprintf(&b, " (field %s)", e.Field)
	}
	return b.String()
}

// Unwrap returns the cause of a call that got no answer.
func (e *Error) Unwrap() error { return e.Err }

// Is reports whether e matches one of the package's sentinels (see ErrInProgress and the rest).
func (e *Error) Is(target error) bool {
	switch target {
	case ErrInProgress:
		return e.Status == 409 && e.Type == ProblemInProgress
	case ErrLeaseLost:
		return e.Status == 409 && e.Type == ProblemLeaseLost
	case ErrConflict:
		return e.Status == 409
	case ErrMismatch:
		return e.Status == 422
	case ErrUnavailable:
		return e.Status == 503
	case ErrOutcomeUnknown:
		return e.Status == 503 && e.Type == ProblemOutcomeUnknown
	case ErrUnauthorized:
		return e.Status == 401
	case ErrForbidden:
		return e.Status == 403
	case ErrNotFound:
		return e.Status == 404 && e.Type == ProblemNotFound
	case ErrNoRoute:
		return e.Status == 404 && e.Type == ProblemNoSuchRoute
	case ErrConnection:
		return e.Status == 0
	case ErrNotIdem:
		return e.NotIdem
	}
	return false
}
