package idem

import (
	"context"
	"encoding/json"
	"net/http"
)

// Intake is idem's answer to an event sent to a source.
type Intake struct {
	// ReceiptID is rcpt_…: the event's receipt, and the webhook-id of its deliveries.
	ReceiptID string `json:"receipt_id"`
	// Status is the receipt's status (ReceiptAccepted for a new event).
	Status string `json:"status"`
	// Replay is true when the event id was seen before with the same body: nothing new was queued.
	Replay bool `json:"replay"`
}

// Events is event intake (docs/reference/api.md#events): c.Events.
type Events struct{ t *transport }

// Send hands an event to the source named source (POST /v1/sources/{name}/events): idem stores
// it once and delivers it to the source's handler until it succeeds. body is sent as it is;
// header, which may be nil, adds headers such as Idempotency-Key (for a source whose event_id is
// "header:Idempotency-Key") or the sender's webhook-* signature (for a source with verify_secret).
// The Content-Type is application/json when body is JSON and header sets none.
//
// The same event id again with the same body answers Replay (the same receipt); with another body,
// ErrConflict. An event without an id is a 400, an unknown source ErrNotFound, a bad signature
// ErrUnauthorized. Retrying is safe: intake deduplicates by event id.
func (e *Events) Send(ctx context.Context, source string, body []byte, header http.Header) (*Intake, error) {
	h := http.Header{}
	for name, values := range header {
		h[http.CanonicalHeaderKey(name)] = values
	}
	if h.Get("Content-Type") == "" {
		if json.Valid(body) {
			h.Set("Content-Type", "application/json")
		} else {
			h.Set("Content-Type", "application/octet-stream")
		}
	}
	if body == nil {
		body = []byte{}
	}
	var out Intake
	req := request{method: "POST", path: "/v1/sources/" + seg(source) + "/events", raw: body, header: h, shape: shapeIntake}
	if err := e.t.call(ctx, req, &out); err != nil {
		return nil, err
	}
	return &out, nil
}
