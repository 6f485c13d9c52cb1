// Package idem is the Go client of idem, the server that makes side effects happen once.
//
// It covers the whole /v1 API: claims (an atomic first-writer-wins dedup store), the Operations
// API (Run does a piece of work once per key, from any number of processes), event intake,
// receipts (dead letters, replay), and Standard Webhooks verification of idem's deliveries
// (VerifyWebhook). It uses the standard library only.
//
//	c := idem.New("") // IDEM_URL (default http://127.0.0.1:7070) and IDEM_TOKEN, or New(url, WithToken(t))
//	r, err := c.Claims.Claim(ctx, "survey", idem.Parts("scenario-1", "user-3", "node-2"))
//	if err != nil { ... }
//	if r.Claimed { ... } // first time: do the thing
//
// Every call takes a context.Context, is retried with exponential backoff and jitter on
// connection errors and 502/503/504 (honouring Retry-After), and has a time limit per attempt.
// Error answers are *Error values that match errors.Is against ErrInProgress, ErrMismatch,
// ErrLeaseLost, ErrConflict, ErrUnavailable, ErrOutcomeUnknown, ErrUnauthorized, ErrForbidden,
// ErrNotFound, ErrNoRoute, ErrConnection and ErrNotIdem (an answer that does not come from idem). A
// Client is safe for concurrent use.
//
// A Claim, ClaimBatch and Begin (and every begin of a Run) carry a client token, made once per
// call and the same on each of its retries, so a retry after a lost answer is told that it won
// (see WithClientToken); Begin's answer carries the lease's fencing number, Operation.Fence.
package idem
