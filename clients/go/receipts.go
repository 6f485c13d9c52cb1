package idem

import (
	"context"
	"encoding/json"
	"errors"
	"net/url"
	"strconv"
	"time"
)

// Receipt statuses: accepted → processing → completed, or through retrying to dead; a dead one
// can be discarded (handled by hand).
const (
	ReceiptAccepted   = "accepted"
	ReceiptProcessing = "processing"
	ReceiptRetrying   = "retrying"
	ReceiptCompleted  = "completed"
	ReceiptDead       = "dead"
	ReceiptDiscarded  = "discarded"
)

// Receipt is what idem keeps of one inbound event, with the API's fields.
type Receipt struct {
	// ID is rcpt_…, also the webhook-id of every delivery of the event.
	ID        string    `json:"id"`
	Source    string    `json:"source"`
	EventID   string    `json:"event_id"`
	Status    string    `json:"status"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
	// Round is 1, plus one per replay.
	Round int `json:"round"`
	// Attempts of every round, oldest first, each with its Round (Get only;
	// not in List pages).
	Attempts []Attempt `json:"attempts,omitempty"`
	// NextAttemptAt: while retrying, when the next attempt is due.
	NextAttemptAt *time.Time     `json:"next_attempt_at,omitempty"`
	ResultWebhook *ResultWebhook `json:"result_webhook"`
	// Body is the event as received when it was JSON (Get only).
	Body json.RawMessage `json:"body,omitempty"`
	// BodyBase64 is the event as received, base64, when it was not JSON (Get only).
	BodyBase64 string `json:"body_base64,omitempty"`
	// ContentType is the event's Content-Type as the sender gave it (Get only).
	ContentType string `json:"content_type,omitempty"`
}

// Attempt is one delivery attempt.
type Attempt struct {
	// Round is the receipt's round the attempt belongs to; N counts from 1 in each.
	Round      int       `json:"round"`
	N          int       `json:"n"`
	StartedAt  time.Time `json:"started_at"`
	DurationMS int64     `json:"duration_ms"`
	// StatusCode is the handler's answer, 0 when there was none (see Error).
	StatusCode int `json:"status_code,omitempty"`
	// Error says why there was no answer (a timeout, a connection error).
	Error string `json:"error,omitempty"`
	// Response is the first 1 KiB of the handler's answer.
	Response string `json:"response,omitempty"`
}

// ResultWebhook is the state of a receipt's result webhook.
type ResultWebhook struct {
	Status         string  `json:"status"`
	Attempts       int     `json:"attempts"`
	LastStatusCode *int    `json:"last_status_code"`
	LastError      *string `json:"last_error"`
}

// ReceiptFilter selects a page of receipts; every field narrows it.
type ReceiptFilter struct {
	Source  string
	Status  string
	EventID string
	// Limit is the page size, 1 to 1000 (0: the server's default, 50).
	Limit int
	// Cursor is the NextCursor of the previous page.
	Cursor string
}

// ReceiptPage is one page of receipts, newest first.
type ReceiptPage struct {
	Items []Receipt
	// NextCursor is the Cursor of the next page; "" on the last page.
	NextCursor string
}

// BulkFilter selects the receipts of CountMatching and ReplayMatching; every field narrows it.
type BulkFilter struct {
	Source string
	// Status is ReceiptDead (the default when empty), ReceiptCompleted or ReceiptDiscarded.
	Status        string
	EventID       string
	CreatedBefore time.Time // zero: no bound
	CreatedAfter  time.Time // zero: no bound
}

// Receipts is the receipts API (docs/reference/api.md#events and #dead-letters-and-retention):
// c.Receipts.
type Receipts struct{ t *transport }

// List returns one page of receipts, newest first.
func (r *Receipts) List(ctx context.Context, f ReceiptFilter) (*ReceiptPage, error) {
	q := url.Values{}
	set := func(name, v string) {
		if v != "" {
			q.Set(name, v)
		}
	}
	set("source", f.Source)
	set("status", f.Status)
	set("event_id", f.EventID)
	set("cursor", f.Cursor)
	if f.Limit != 0 {
		q.Set("limit", strconv.Itoa(f.Limit))
	}
	var out struct {
		Receipts   []Receipt `json:"receipts"`
		NextCursor *string   `json:"next_cursor"`
	}
	if err := r.t.call(ctx, request{method: "GET", path: "/v1/receipts", query: q, shape: shapeReceiptPage}, &out); err != nil {
		return nil, err
	}
	page := &ReceiptPage{Items: out.Receipts}
	if out.NextCursor != nil {
		page.NextCursor = *out.NextCursor
	}
	return page, nil
}

// Each calls fn with every receipt matching f, newest first, fetching page after page; it stops
// at the first error, fn's or the server's.
func (r *Receipts) Each(ctx context.Context, f ReceiptFilter, fn func(Receipt) error) error {
	for {
		page, err := r.List(ctx, f)
		if err != nil {
			return err
		}
		for _, rc := range page.Items {
			if err := fn(rc); err != nil {
				return err
			}
		}
		if page.NextCursor == "" || len(page.Items) == 0 {
			return nil
		}
		f.Cursor = page.NextCursor
	}
}

// Get returns one receipt with its attempts and its event, or nil, nil when there is none.
func (r *Receipts) Get(ctx context.Context, id string) (*Receipt, error) {
	var out Receipt
	err := r.t.call(ctx, request{method: "GET", path: "/v1/receipts/" + seg(id), shape: shapeReceipt}, &out)
	if errors.Is(err, ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	out.Body = nullToNil(out.Body)
	return &out, nil
}

// Replay delivers a dead, discarded or completed receipt again from attempt 1, with the same
// webhook-id. ErrConflict while it is still being delivered; ErrNotFound when there is none.
func (r *Receipts) Replay(ctx context.Context, id string) error {
	return r.t.call(ctx, request{method: "POST", path: "/v1/receipts/" + seg(id) + "/replay", shape: shapeReceiptAck}, nil)
}

// Discard marks a dead receipt as handled by hand: it leaves the dead letters and can still be
// replayed. ErrConflict when it is not dead; ErrNotFound when there is none.
func (r *Receipts) Discard(ctx context.Context, id string) error {
	return r.t.call(ctx, request{method: "POST", path: "/v1/receipts/" + seg(id) + "/discard", shape: shapeReceiptAck}, nil)
}

// CountMatching is how many receipts ReplayMatching(f) would replay now; it changes nothing.
func (r *Receipts) CountMatching(ctx context.Context, f BulkFilter) (int64, error) {
	body := bulkBody(f)
	body["dry_run"] = true
	var out struct {
		Matching int64 `json:"matching"`
	}
	err := r.t.call(ctx, request{method: "POST", path: "/v1/receipts/replay", json: body, shape: shapeMatching}, &out)
	return out.Matching, err
}

// ReplayMatching replays every receipt matching f (by default every dead letter) from attempt 1
// and answers how many were queued. It is safe to repeat: a repeat finds only what still matches.
func (r *Receipts) ReplayMatching(ctx context.Context, f BulkFilter) (int64, error) {
	var out struct {
		Queued int64 `json:"queued"`
	}
	err := r.t.call(ctx, request{method: "POST", path: "/v1/receipts/replay", json: bulkBody(f), shape: shapeQueued}, &out)
	return out.Queued, err
}

func bulkBody(f BulkFilter) map[string]any {
	body := map[string]any{}
	set := func(name, v string) {
		if v != "" {
			body[name] = v
		}
	}
	set("source", f.Source)
	set("status", f.Status)
	set("event_id", f.EventID)
	if !f.CreatedBefore.IsZero() {
		body["created_before"] = f.CreatedBefore.UTC().Format(time.RFC3339Nano)
	}
	if !f.CreatedAfter.IsZero() {
		body["created_after"] = f.CreatedAfter.UTC().Format(time.RFC3339Nano)
	}
	return body
}
