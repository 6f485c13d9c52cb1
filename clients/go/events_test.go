package idem_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	idem "github.com/idem-dev/idem/clients/go"
)

func eventBody(id string, fail bool) []byte {
	b, _ := json.Marshal(map[string]any{"id": id, "fail": fail, "amount": 12})
	return b
}

// uniqueID is an event id of the test's own.
func uniqueID(t *testing.T, what string) string {
	return fmt.Sprintf("%s-%s-%d", t.Name(), what, time.Now().UnixNano())
}

// waitStatus polls the receipt until it has status.
func waitStatus(t *testing.T, c *idem.Client, id, status string) *idem.Receipt {
	t.Helper()
	var r *idem.Receipt
	eventually(t, 15*time.Second, "receipt "+id+" becomes "+status, func() bool {
		var err error
		r, err = c.Receipts.Get(ctxFor(t), id)
		if err != nil {
			t.Fatal(err)
		}
		return r != nil && r.Status == status
	})
	return r
}

// An event sent through intake is delivered, signed, to the handler; VerifyWebhook accepts the
// real delivery and refuses it with another secret, another body, or at another time.
func TestEventDeliveryAndVerifyWebhook(t *testing.T) {
	ctx, c := ctxFor(t), client()
	id := uniqueID(t, "ok")
	body := eventBody(id, false)
	in, err := c.Events.Send(ctx, "gotest", body, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(in.ReceiptID, "rcpt_") || in.Status != idem.ReceiptAccepted || in.Replay {
		t.Fatalf("intake: %+v", in)
	}
	r := waitStatus(t, c, in.ReceiptID, idem.ReceiptCompleted)
	if r.Source != "gotest" || r.EventID != id || r.Round != 1 || len(r.Attempts) != 1 || r.Attempts[0].StatusCode != 204 || r.Attempts[0].N != 1 {
		t.Fatalf("receipt: %+v", r)
	}
	if r.ContentType != "application/json" || string(r.Body) == "" || r.BodyBase64 != "" {
		t.Fatalf("the receipt keeps the JSON event: %+v", r)
	}
	var kept map[string]any
	if err := json.Unmarshal(r.Body, &kept); err != nil || kept["id"] != id {
		t.Fatalf("body %s: %v", r.Body, err)
	}

	ds := sink.of("/handle", in.ReceiptID)
	if len(ds) != 1 {
		t.Fatalf("%d deliveries", len(ds))
	}
	d := ds[0]
	if d.Header.Get("Idem-Attempt") != "1" || string(d.Body) != string(body) {
		t.Fatalf("delivery: %v %s", d.Header, d.Body)
	}
	payload, err := idem.VerifyWebhook(signingSecret, d.Header, d.Body)
	if err != nil {
		t.Fatalf("a real delivery must verify: %v", err)
	}
	var ev struct{ ID string }
	if err := json.Unmarshal(payload, &ev); err != nil || ev.ID != id {
		t.Fatalf("payload %s", payload)
	}

	refuse := func(what string, secret string, h http.Header, b []byte, now time.Time) {
		t.Helper()
		if _, err := idem.VerifyWebhookAt(secret, h, b, now, idem.WebhookTolerance); !errors.Is(err, idem.ErrWebhookVerification) {
			t.Errorf("%s: want ErrWebhookVerification, got %v", what, err)
		}
	}
	now := time.Now()
	refuse("another secret", "whsec_"+strings.Repeat("A", 43)+"=", d.Header, d.Body, now)
	refuse("another body", signingSecret, d.Header, append([]byte(nil), append(d.Body, ' ')...), now)
	refuse("six minutes later", signingSecret, d.Header, d.Body, now.Add(6*time.Minute))
	refuse("six minutes earlier", signingSecret, d.Header, d.Body, now.Add(-6*time.Minute))
	forged := d.Header.Clone()
	forged.Set("Webhook-Id", "rcpt_forged")
	refuse("another webhook-id", signingSecret, forged, d.Body, now)
	stale := d.Header.Clone()
	old := now.Add(-10 * time.Minute)
	sig, _ := idem.SignWebhook(signingSecret, d.Header.Get("Webhook-Id"), old, d.Body)
	stale.Set("Webhook-Timestamp", fmt.Sprint(old.Unix()))
	stale.Set("Webhook-Signature", sig)
	refuse("a correctly signed but expired request", signingSecret, stale, d.Body, now)
	if _, err := idem.VerifyWebhookAt(signingSecret, stale, d.Body, old.Add(time.Minute), idem.WebhookTolerance); err != nil {
		t.Errorf("SignWebhook must make what idem makes: %v", err)
	}
	// During a secret rotation the header lists several signatures: one match is enough.
	rotated := d.Header.Clone()
	rotated.Set("Webhook-Signature", "v1,AAAA v2,whatever "+d.Header.Get("Webhook-Signature"))
	if _, err := idem.VerifyWebhook(signingSecret, rotated, d.Body); err != nil {
		t.Errorf("several signatures: %v", err)
	}

	// The result webhook is signed the same way.
	eventually(t, 10*time.Second, "the result webhook", func() bool {
		res, _ := sink.resultsFor(in.ReceiptID)
		return len(res) > 0
	})
	res, raw := sink.resultsFor(in.ReceiptID)
	if res[0]["type"] != "receipt.completed" || res[0]["event_id"] != id {
		t.Fatalf("result webhook: %v", res[0])
	}
	if _, err := idem.VerifyWebhook(signingSecret, raw[0].Header, raw[0].Body); err != nil {
		t.Fatalf("the result webhook must verify: %v", err)
	}
}

// Intake deduplicates: the same event again is a replay of the same receipt; another body under
// the same id is ErrConflict; an unknown source is ErrNotFound; no event id is a 400.
func TestIntakeDedup(t *testing.T) {
	ctx, c := ctxFor(t), client()
	id := uniqueID(t, "dup")
	first, err := c.Events.Send(ctx, "gotest", []byte(fmt.Sprintf(`{"id":%q,"amount":12}`, id)), nil)
	if err != nil {
		t.Fatal(err)
	}
	// The same JSON with its keys in another order is the same event.
	again, err := c.Events.Send(ctx, "gotest", []byte(fmt.Sprintf(`{"amount": 12, "id": %q}`, id)), nil)
	if err != nil || !again.Replay || again.ReceiptID != first.ReceiptID {
		t.Fatalf("resend: %+v %v", again, err)
	}
	if _, err := c.Events.Send(ctx, "gotest", []byte(fmt.Sprintf(`{"id":%q,"amount":13}`, id)), nil); !errors.Is(err, idem.ErrConflict) {
		t.Fatalf("another body: want ErrConflict, got %v", err)
	}
	if _, err := c.Events.Send(ctx, "no-such-source", []byte(`{"id":"x"}`), nil); !errors.Is(err, idem.ErrNotFound) {
		t.Fatalf("unknown source: %v", err)
	}
	if _, err := c.Events.Send(ctx, "gotest", []byte(`{"no_id":1}`), nil); !isStatus(err, 400) {
		t.Fatalf("no event id: %v", err)
	}
	// A source whose event id is a header; the body need not be JSON.
	h := http.Header{"Idempotency-Key": {uniqueID(t, "hdr")}}
	in, err := c.Events.Send(ctx, "byheader", []byte("plain text"), h)
	if err != nil || in.Replay {
		t.Fatalf("by header: %+v %v", in, err)
	}
	r := waitStatus(t, c, in.ReceiptID, idem.ReceiptCompleted)
	if r.BodyBase64 != "cGxhaW4gdGV4dA==" || r.Body != nil || r.ContentType != "application/octet-stream" {
		t.Fatalf("a body that is not JSON: %+v", r)
	}
	waitStatus(t, c, first.ReceiptID, idem.ReceiptCompleted)
}

// A failing handler: the receipt dies after max_attempts (2); CountMatching counts it, Discard
// takes it out of the dead letters, Replay and ReplayMatching deliver it again from attempt 1
// with the same webhook-id.
func TestDeadLettersAndReplay(t *testing.T) {
	ctx, c := ctxFor(t), client()
	id := uniqueID(t, "poison")
	in, err := c.Events.Send(ctx, "gotest", eventBody(id, true), nil)
	if err != nil {
		t.Fatal(err)
	}
	dead := waitStatus(t, c, in.ReceiptID, idem.ReceiptDead)
	if len(dead.Attempts) != 2 || dead.Attempts[1].StatusCode != 500 || !strings.Contains(dead.Attempts[1].Response, "failing on purpose") {
		t.Fatalf("dead receipt: %+v", dead.Attempts)
	}
	filter := idem.BulkFilter{Source: "gotest", EventID: id}
	if n, err := c.Receipts.CountMatching(ctx, filter); err != nil || n != 1 {
		t.Fatalf("count dead: %d %v", n, err)
	}
	page, err := c.Receipts.List(ctx, idem.ReceiptFilter{Source: "gotest", Status: idem.ReceiptDead})
	if err != nil || !containsReceipt(page.Items, in.ReceiptID) {
		t.Fatalf("list dead: %+v %v", page, err)
	}
	if err := c.Receipts.Discard(ctx, in.ReceiptID); err != nil {
		t.Fatal(err)
	}
	if r, _ := c.Receipts.Get(ctx, in.ReceiptID); r.Status != idem.ReceiptDiscarded {
		t.Fatalf("after discard: %s", r.Status)
	}
	if n, err := c.Receipts.CountMatching(ctx, filter); err != nil || n != 0 {
		t.Fatalf("a discarded receipt is no dead letter: %d %v", n, err)
	}
	if n, err := c.Receipts.CountMatching(ctx, idem.BulkFilter{Source: "gotest", EventID: id, Status: idem.ReceiptDiscarded}); err != nil || n != 1 {
		t.Fatalf("count discarded: %d %v", n, err)
	}

	// Still failing: a replay dies again, in round 2.
	if err := c.Receipts.Replay(ctx, in.ReceiptID); err != nil {
		t.Fatal(err)
	}
	eventually(t, 15*time.Second, "round 2 dies", func() bool {
		r, _ := c.Receipts.Get(ctx, in.ReceiptID)
		return r.Round == 2 && r.Status == idem.ReceiptDead
	})
	// Healed: a bulk replay, bounded by creation time, delivers it.
	sink.heal(id)
	n, err := c.Receipts.ReplayMatching(ctx, idem.BulkFilter{Source: "gotest", EventID: id, CreatedAfter: time.Now().Add(-time.Hour), CreatedBefore: time.Now().Add(time.Minute)})
	if err != nil || n != 1 {
		t.Fatalf("replay matching: %d %v", n, err)
	}
	done := waitStatus(t, c, in.ReceiptID, idem.ReceiptCompleted)
	// The receipt keeps every round's attempts: two in round 1, two in round 2, one in round 3.
	var rounds []int
	for _, a := range done.Attempts {
		rounds = append(rounds, a.Round*10+a.N)
	}
	if done.Round != 3 || fmt.Sprint(rounds) != "[11 12 21 22 31]" || done.Attempts[4].StatusCode != 204 {
		t.Fatalf("after the bulk replay (round*10+n per attempt: %v): %+v", rounds, done)
	}
	// Every delivery, in every round, had the same webhook-id and verified.
	ds := sink.of("/handle", in.ReceiptID)
	if len(ds) != 5 {
		t.Fatalf("%d deliveries, want 2+2+1", len(ds))
	}
	for _, d := range ds {
		if _, err := idem.VerifyWebhook(signingSecret, d.Header, d.Body); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Receipts.Discard(ctx, in.ReceiptID); !errors.Is(err, idem.ErrConflict) {
		t.Fatalf("discarding a completed receipt: want ErrConflict, got %v", err)
	}
	// A completed receipt can be replayed too: delivered again, same webhook-id.
	if err := c.Receipts.Replay(ctx, in.ReceiptID); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "the completed receipt is delivered again", func() bool {
		return len(sink.of("/handle", in.ReceiptID)) == 6
	})
	if err := c.Receipts.Replay(ctx, "rcpt_0123456789abcdef0123456789abcdef0123"); !errors.Is(err, idem.ErrNotFound) {
		t.Fatalf("replay of no receipt: %v", err)
	}
	if r, err := c.Receipts.Get(ctx, "rcpt_0123456789abcdef0123456789abcdef0123"); r != nil || err != nil {
		t.Fatalf("get of no receipt: %+v %v", r, err)
	}
}

// List pages with a cursor; Each walks every page.
func TestReceiptPaging(t *testing.T) {
	ctx, c := ctxFor(t), client()
	prefix := uniqueID(t, "page")
	var ids []string
	for i := 0; i < 5; i++ {
		in, err := c.Events.Send(ctx, "byheader", []byte("x"), http.Header{"Idempotency-Key": {fmt.Sprintf("%s-%d", prefix, i)}})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, in.ReceiptID)
	}
	seen := map[string]bool{}
	cursor := ""
	pages := 0
	for {
		page, err := c.Receipts.List(ctx, idem.ReceiptFilter{Source: "byheader", Limit: 2, Cursor: cursor})
		if err != nil {
			t.Fatal(err)
		}
		if len(page.Items) > 2 {
			t.Fatalf("a page of %d with limit 2", len(page.Items))
		}
		pages++
		for _, r := range page.Items {
			seen[r.ID] = true
		}
		if page.NextCursor == "" {
			break
		}
		cursor = page.NextCursor
	}
	for _, id := range ids {
		if !seen[id] {
			t.Fatalf("receipt %s not listed in %d pages", id, pages)
		}
	}
	n := 0
	err := c.Receipts.Each(ctx, idem.ReceiptFilter{Source: "byheader", Limit: 2}, func(r idem.Receipt) error {
		n++
		return nil
	})
	if err != nil || n != len(seen) {
		t.Fatalf("Each: %d receipts, %v; List: %d", n, err, len(seen))
	}
	one, err := c.Receipts.List(ctx, idem.ReceiptFilter{EventID: prefix + "-3"})
	if err != nil || len(one.Items) != 1 || one.Items[0].ID != ids[3] {
		t.Fatalf("by event id: %+v %v", one, err)
	}
}

func containsReceipt(rs []idem.Receipt, id string) bool {
	for _, r := range rs {
		if r.ID == id {
			return true
		}
	}
	return false
}

// VerifyWebhook without a server: missing headers, a bad secret, malformed timestamps.
func TestVerifyWebhookRefusals(t *testing.T) {
	body := []byte(`{"a":1}`)
	now := time.Unix(1_800_000_000, 0)
	sig, err := idem.SignWebhook(signingSecret, "msg_1", now, body)
	if err != nil {
		t.Fatal(err)
	}
	good := http.Header{"Webhook-Id": {"msg_1"}, "Webhook-Timestamp": {fmt.Sprint(now.Unix())}, "Webhook-Signature": {sig}}
	if _, err := idem.VerifyWebhookAt(signingSecret, good, body, now, idem.WebhookTolerance); err != nil {
		t.Fatal(err)
	}
	// Plain base64 without the prefix is the same secret.
	if _, err := idem.VerifyWebhookAt(strings.TrimPrefix(signingSecret, "whsec_"), good, body, now, idem.WebhookTolerance); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"Webhook-Id", "Webhook-Timestamp", "Webhook-Signature"} {
		h := good.Clone()
		h.Del(name)
		if _, err := idem.VerifyWebhookAt(signingSecret, h, body, now, idem.WebhookTolerance); !errors.Is(err, idem.ErrWebhookVerification) {
			t.Errorf("without %s: %v", name, err)
		}
	}
	for _, ts := range []string{"soon", "-1", "1800000000.5", "99999999999999999999"} {
		h := good.Clone()
		h.Set("Webhook-Timestamp", ts)
		if _, err := idem.VerifyWebhookAt(signingSecret, h, body, now, idem.WebhookTolerance); !errors.Is(err, idem.ErrWebhookVerification) {
			t.Errorf("timestamp %q: %v", ts, err)
		}
	}
	for _, s := range []string{"v1," + strings.Repeat("A", 44), "v2," + strings.TrimPrefix(sig, "v1,"), strings.TrimPrefix(sig, "v1,"), "v1,not base64!"} {
		h := good.Clone()
		h.Set("Webhook-Signature", s)
		if _, err := idem.VerifyWebhookAt(signingSecret, h, body, now, idem.WebhookTolerance); !errors.Is(err, idem.ErrWebhookVerification) {
			t.Errorf("signature %q: %v", s, err)
		}
	}
	// 4 minutes 59 off either way passes; 5 minutes 1 does not.
	for _, off := range []time.Duration{-299 * time.Second, 299 * time.Second} {
		if _, err := idem.VerifyWebhookAt(signingSecret, good, body, now.Add(off), idem.WebhookTolerance); err != nil {
			t.Errorf("%s off: %v", off, err)
		}
	}
	for _, off := range []time.Duration{-301 * time.Second, 301 * time.Second} {
		if _, err := idem.VerifyWebhookAt(signingSecret, good, body, now.Add(off), idem.WebhookTolerance); !errors.Is(err, idem.ErrWebhookVerification) {
			t.Errorf("%s off: %v", off, err)
		}
	}
	if _, err := idem.VerifyWebhook("whsec_not base64!", good, body); err == nil || errors.Is(err, idem.ErrWebhookVerification) {
		t.Errorf("a bad secret is a configuration error, not a bad request: %v", err)
	}
}
