package idem

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// ErrWebhookVerification is matched (errors.Is) by every error of VerifyWebhook that says the
// request is not to be trusted: a missing header, no matching signature, a timestamp too old or
// in the future. A secret that is not base64 is a different error: a configuration mistake.
var ErrWebhookVerification = errors.New("idem: webhook verification failed")

// WebhookTolerance is how far webhook-timestamp may be from now.
const WebhookTolerance = 5 * time.Minute

// VerifyWebhook verifies a Standard Webhooks request (idem's deliveries to your handler and its
// result webhooks) and returns its body as JSON, to unmarshal.
//
//   - secret: the source's signing_secret, "whsec_" + base64 (plain base64 is accepted too);
//   - header: the request's headers (r.Header);
//   - body: the raw body exactly as received, not re-encoded JSON.
//
// webhook-signature is "v1,<base64 HMAC-SHA256 of "id.timestamp.body">" and may list several
// space-separated signatures (during a secret rotation): one matching v1 signature is enough; every
// one is compared in constant time. webhook-timestamp must be within 5 minutes of now.
func VerifyWebhook(secret string, header http.Header, body []byte) (json.RawMessage, error) {
	return VerifyWebhookAt(secret, header, body, time.Now(), WebhookTolerance)
}

// VerifyWebhookAt is VerifyWebhook with the time to check webhook-timestamp against and the
// tolerance given (for tests).
func VerifyWebhookAt(secret string, header http.Header, body []byte, now time.Time, tolerance time.Duration) (json.RawMessage, error) {
	key, err := webhookKey(secret)
	if err != nil {
		return nil, err
	}
	id := header.Get("Webhook-Id")
	ts := strings.TrimSpace(header.Get("Webhook-Timestamp"))
	signatures := strings.Join(header.Values("Webhook-Signature"), " ")
	if id == "" || ts == "" || strings.TrimSpace(signatures) == "" {
		return nil, fmt.Errorf("%w: missing webhook-id, webhook-timestamp or webhook-signature header", ErrWebhookVerification)
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil || len(ts) > 15 {
		return nil, fmt.Errorf("%w: webhook-timestamp %q is not a Unix time in seconds", ErrWebhookVerification, ts)
	}
	at := time.Unix(sec, 0)
	if at.Before(now.Add(-tolerance)) {
		return nil, fmt.Errorf("%w: webhook-timestamp is %s old", ErrWebhookVerification, now.Sub(at).Truncate(time.Second))
	}
	if at.After(now.Add(tolerance)) {
		return nil, fmt.Errorf("%w: webhook-timestamp is %s in the future", ErrWebhookVerification, at.Sub(now).Truncate(time.Second))
	}
	expected := sign(key, id, ts, body)
	matched := 0
	for _, entry := range strings.Fields(signatures) {
		version, sig, ok := strings.Cut(entry, ",")
		if !ok || version != "v1" {
			continue
		}
		candidate, err := base64.StdEncoding.DecodeString(sig)
		if err != nil {
			continue
		}
		// Every candidate is compared, each in constant time.
		matched |= subtle.ConstantTimeCompare(candidate, expected)
	}
	if matched != 1 {
		return nil, fmt.Errorf("%w: no matching signature", ErrWebhookVerification)
	}
	return json.RawMessage(body), nil
}

// SignWebhook is the webhook-signature value ("v1,<base64>") idem would send for this id,
// timestamp and body: for tests of your own handler.
func SignWebhook(secret, id string, timestamp time.Time, body []byte) (string, error) {
	key, err := webhookKey(secret)
	if err != nil {
		return "", err
	}
	sig := sign(key, id, strconv.FormatInt(timestamp.Unix(), 10), body)
	return "v1," + base64.StdEncoding.EncodeToString(sig), nil
}

func sign(key []byte, id, ts string, body []byte) []byte {
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(id + "." + ts + "."))
	mac.Write(body)
	return mac.Sum(nil)
}

func webhookKey(secret string) ([]byte, error) {
	encoded := strings.TrimPrefix(secret, "whsec_")
	key, err := base64.StdEncoding.DecodeString(encoded)
	if err != nil || len(key) == 0 {
		return nil, errors.New("idem: the webhook secret must be whsec_ followed by base64 (the source's signing_secret)")
	}
	return key, nil
}
