package idem_test

// Seed 003's PHP handler (examples/partner-events/php/handler.php) under `php -S`, as the handler
// of a real idem source: an event sent through intake is verified and processed once, a replay
// (a redelivery with the same webhook-id) is not processed again, and forged requests sent to it
// directly get 401 and run nothing.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	idem "github.com/idem-dev/idem/clients/go"
	"github.com/idem-dev/idem/clients/go/idemtest"
)

type phpStats struct {
	Processed     []string `json:"processed"`
	Duplicates    int      `json:"duplicates"`
	BadSignatures int      `json:"bad_signatures"`
	Results       int      `json:"results"`
}

// startPHP serves handler.php with `php -S 127.0.0.1:PORT handler.php` and returns its base URL.
func startPHP(t *testing.T, secret string) string {
	t.Helper()
	php, err := exec.LookPath("php")
	if err != nil {
		t.Skip("SKIPPED: php is not installed (Debian: apt-get install php-cli); .ci/run installs it")
	}
	script, err := filepath.Abs("../../examples/partner-events/php/handler.php")
	if err != nil {
		t.Fatal(err)
	}
	for try := 0; ; try++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := l.Addr().String()
		l.Close()
		var logs bytes.Buffer
		cmd := exec.Command(php, "-S", addr, script)
		cmd.Dir = filepath.Dir(script)
		cmd.Env = append(os.Environ(), "IDEM_SIGNING_SECRET="+secret, "IDEM_HANDLER_STATE_DIR="+t.TempDir())
		cmd.Stdout, cmd.Stderr = &logs, &logs
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		exited := make(chan struct{})
		go func() { _ = cmd.Wait(); close(exited) }()
		t.Cleanup(func() {
			_ = cmd.Process.Kill()
			<-exited
			if t.Failed() {
				t.Logf("php -S log:\n%s", logs.String())
			}
		})
		url := "http://" + addr
		deadline := time.Now().Add(10 * time.Second)
		for time.Now().Before(deadline) {
			select {
			case <-exited:
				deadline = time.Time{}
				continue
			default:
			}
			if res, err := http.Get(url + "/stats"); err == nil {
				res.Body.Close()
				if res.StatusCode == 200 {
					return url
				}
			}
			time.Sleep(20 * time.Millisecond)
		}
		if try == 2 {
			t.Fatalf("php -S did not serve %s:\n%s", url, logs.String())
		}
	}
}

func stats(t *testing.T, url string) phpStats {
	t.Helper()
	res, err := http.Get(url + "/stats")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var s phpStats
	if err := json.NewDecoder(res.Body).Decode(&s); err != nil {
		t.Fatal(err)
	}
	return s
}

// post sends a request straight to the handler, as a forger would.
func post(t *testing.T, url string, h http.Header, body []byte) int {
	t.Helper()
	return postTo(t, url+"/handle", h, body)
}

// postTo sends body with headers h to target and answers the status.
func postTo(t *testing.T, target string, h http.Header, body []byte) int {
	t.Helper()
	req, _ := http.NewRequest("POST", target, bytes.NewReader(body))
	req.Header = h
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, res.Body)
	res.Body.Close()
	return res.StatusCode
}

func signed(t *testing.T, secret, id string, at time.Time, body []byte) http.Header {
	sig, err := idem.SignWebhook(secret, id, at, body)
	if err != nil {
		t.Fatal(err)
	}
	return http.Header{
		"Content-Type":      {"application/json"},
		"Webhook-Id":        {id},
		"Webhook-Timestamp": {fmt.Sprint(at.Unix())},
		"Webhook-Signature": {sig},
	}
}

func TestPHPHandler(t *testing.T) {
	php := startPHP(t, signingSecret)
	server, err := idemtest.Start(idemtest.Options{Bin: bin, Config: fmt.Sprintf(`
[[sources]]
name = "partner"
handler_url = "%[1]s/handle"
event_id = "/external_event_id"
max_attempts = 3
backoff = ["100ms"]
signing_secret = %[2]q
result_webhook_url = "%[1]s/results"
result_backoff = ["100ms"]
`, php, signingSecret)})
	if err != nil {
		t.Fatal(err)
	}
	defer server.Close()
	ctx := ctxFor(t)
	c := idem.New(server.URL)

	// An event through idem: delivered, verified and processed once.
	in, err := c.Events.Send(ctx, "partner", []byte(`{"external_event_id":"evt-1","type":"order.paid","amount":4200}`), nil)
	if err != nil {
		t.Fatal(err)
	}
	r := waitStatus(t, c, in.ReceiptID, idem.ReceiptCompleted)
	if len(r.Attempts) != 1 || r.Attempts[0].StatusCode != 204 {
		t.Fatalf("the handler must answer 204: %+v", r.Attempts)
	}
	s := stats(t, php)
	if len(s.Processed) != 1 || s.Processed[0] != in.ReceiptID || s.Duplicates != 0 || s.BadSignatures != 0 {
		t.Fatalf("after the first delivery: %+v", s)
	}

	// idem delivers again (a replay: same webhook-id): answered 204, not processed again.
	if err := c.Receipts.Replay(ctx, in.ReceiptID); err != nil {
		t.Fatal(err)
	}
	eventually(t, 15*time.Second, "the replay completes", func() bool {
		r, err := c.Receipts.Get(ctx, in.ReceiptID)
		return err == nil && r.Round == 2 && r.Status == idem.ReceiptCompleted
	})
	s = stats(t, php)
	if len(s.Processed) != 1 || s.Duplicates != 1 || s.BadSignatures != 0 {
		t.Fatalf("after the redelivery: %+v", s)
	}
	// The partner resending the event is a replay at intake: nothing is delivered.
	again, err := c.Events.Send(ctx, "partner", []byte(`{"type":"order.paid","external_event_id":"evt-1","amount":4200}`), nil)
	if err != nil || !again.Replay || again.ReceiptID != in.ReceiptID {
		t.Fatalf("resend: %+v %v", again, err)
	}
	eventually(t, 10*time.Second, "result webhooks arrive", func() bool { return stats(t, php).Results >= 2 })

	// Straight to the handler: what the Go client signs as idem does is accepted...
	now := time.Now()
	body := []byte(`{"external_event_id":"evt-direct","amount":1}`)
	if code := post(t, php, signed(t, signingSecret, "msg_direct_1", now, body), body); code != 204 {
		t.Fatalf("a genuine request: %d", code)
	}
	// ...also among several signatures (a secret rotation)...
	h := signed(t, signingSecret, "msg_direct_2", now, body)
	h.Set("Webhook-Signature", "v1,"+strings.Repeat("A", 43)+"= "+h.Get("Webhook-Signature"))
	if code := post(t, php, h, body); code != 204 {
		t.Fatalf("several signatures: %d", code)
	}
	// ...and forgeries are refused with 401 and run nothing.
	forgeries := map[string]func() (http.Header, []byte){
		"another secret": func() (http.Header, []byte) {
			return signed(t, "whsec_"+strings.Repeat("B", 43)+"=", "msg_forged_1", now, body), body
		},
		"another body": func() (http.Header, []byte) {
			return signed(t, signingSecret, "msg_forged_2", now, body), []byte(`{"external_event_id":"evt-direct","amount":1000000}`)
		},
		"another webhook-id": func() (http.Header, []byte) {
			h := signed(t, signingSecret, "msg_forged_3", now, body)
			h.Set("Webhook-Id", "msg_forged_3b")
			return h, body
		},
		"a correctly signed request ten minutes old": func() (http.Header, []byte) {
			return signed(t, signingSecret, "msg_forged_4", now.Add(-10*time.Minute), body), body
		},
		"a correctly signed request ten minutes ahead": func() (http.Header, []byte) {
			return signed(t, signingSecret, "msg_forged_5", now.Add(10*time.Minute), body), body
		},
		"no signature": func() (http.Header, []byte) {
			h := signed(t, signingSecret, "msg_forged_6", now, body)
			h.Del("Webhook-Signature")
			return h, body
		},
		"a v2 signature": func() (http.Header, []byte) {
			h := signed(t, signingSecret, "msg_forged_7", now, body)
			h.Set("Webhook-Signature", strings.Replace(h.Get("Webhook-Signature"), "v1,", "v2,", 1))
			return h, body
		},
	}
	for what, forge := range forgeries {
		h, b := forge()
		if code := post(t, php, h, b); code != 401 {
			t.Errorf("%s: want 401, got %d", what, code)
		}
	}
	s = stats(t, php)
	if fmt.Sprint(s.Processed) != fmt.Sprint([]string{in.ReceiptID, "msg_direct_1", "msg_direct_2"}) {
		t.Fatalf("processed: %v", s.Processed)
	}
	if s.BadSignatures != len(forgeries) || s.Duplicates != 1 {
		t.Fatalf("after the forgeries: %+v", s)
	}
}

// A signing secret rotated without a failed delivery or a refused event: while a source lists two
// secrets, idem signs every delivery with both (a handler that knows either, here the PHP one,
// accepts it) and accepts an event signed with either. idem's signatures are checked by PHP's
// hash_hmac, and the partner's are made by the Go client: neither is idem's own code.
func TestSecretRotation(t *testing.T) {
	const newSecret = "whsec_bmV3LXNlY3JldC1mb3Itcm90YXRpb24tMDEyMzQ1"
	const otherSecret = "whsec_b3RoZXItc2VjcmV0LW5vdC1yb3RhdGVkLTAxMjM0"
	phpOld, phpNew := startPHP(t, signingSecret), startPHP(t, newSecret)
	source := func(name, handler, extra string) string {
		return fmt.Sprintf("[[sources]]\nname = %q\nhandler_url = \"%s/handle\"\nevent_id = \"/external_event_id\"\n"+
			"backoff = [\"100ms\"]\nsigning_secret = [%q, %q]\n%s\n", name, handler, newSecret, signingSecret, extra)
	}
	server, err := idemtest.Start(idemtest.Options{Bin: bin, Config: source("to-old", phpOld, "") + source("to-new", phpNew, "") +
		source("partner", phpNew, fmt.Sprintf("verify_secret = [%q, %q]", newSecret, signingSecret))})
	if err != nil {
		t.Fatal(err)
	}
	defer server.Close()
	ctx := ctxFor(t)
	c := idem.New(server.URL)

	for _, name := range []string{"to-old", "to-new"} {
		in, err := c.Events.Send(ctx, name, []byte(`{"external_event_id":"evt-`+name+`"}`), nil)
		if err != nil {
			t.Fatal(err)
		}
		if r := waitStatus(t, c, in.ReceiptID, idem.ReceiptCompleted); r.Attempts[0].StatusCode != 204 {
			t.Fatalf("%s: the handler must accept the delivery at once: %+v", name, r.Attempts)
		}
	}
	for _, php := range []string{phpOld, phpNew} {
		if s := stats(t, php); len(s.Processed) != 1 || s.BadSignatures != 0 {
			t.Fatalf("each handler verifies idem's signatures with its one secret: %+v", s)
		}
	}

	intake := func(secret, id string) int {
		body := []byte(`{"external_event_id":"` + id + `"}`)
		return postTo(t, server.URL+"/v1/sources/partner/events", signed(t, secret, "msg_"+id, time.Now(), body), body)
	}
	for secret, want := range map[string]int{signingSecret: 202, newSecret: 202, otherSecret: 401} {
		if got := intake(secret, "evt-"+secret[6:14]); got != want {
			t.Errorf("an event signed with %s…: want %d, got %d", secret[:14], want, got)
		}
	}
}
