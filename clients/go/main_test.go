package idem_test

// The integration tests run against a real `idem serve` (the binary in $IDEM_BIN, default
// ../../target/debug/idem): TestMain starts an event sink (an httptest server that is the handler
// of the source "gotest"), then two servers, one without auth and one with [auth] tokens, and
// stops them at the end.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	idem "github.com/idem-dev/idem/clients/go"
	"github.com/idem-dev/idem/clients/go/idemtest"
)

const (
	// signingSecret is the source's signing_secret: whsec_ + base64 of 32 bytes.
	signingSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSwMfKQ9r8GKYo="
	authToken     = "go-client-test-token"
)

var (
	srv     *idemtest.Server // no auth; a [[sources]] "gotest" delivering to sink
	authSrv *idemtest.Server // [auth] tokens = [authToken]
	sink    *eventSink
	bin     string
	nsSeq   atomic.Int64
)

func TestMain(m *testing.M) {
	// The client reads IDEM_URL and IDEM_TOKEN when none is given: the tests give theirs, and a
	// developer's own settings must not reach them.
	os.Unsetenv("IDEM_URL")
	os.Unsetenv("IDEM_TOKEN")
	bin = os.Getenv("IDEM_BIN")
	if bin == "" {
		bin = os.Getenv("IDEM_TEST_BIN")
	}
	if bin == "" {
		bin = "../../target/debug/idem"
	}
	sink = newEventSink()
	hs := httptest.NewServer(sink)
	code := func() int {
		defer hs.Close()
		var err error
		srv, err = idemtest.Start(idemtest.Options{Bin: bin, Config: mainConfig(hs.URL)})
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer srv.Close()
		authSrv, err = idemtest.Start(idemtest.Options{Bin: bin, Config: fmt.Sprintf("[auth]\ntokens = [%q]\n", authToken)})
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer authSrv.Close()
		return m.Run()
	}()
	os.Exit(code)
}

func mainConfig(sinkURL string) string {
	return fmt.Sprintf(`
[namespaces.ninety_days]
default_ttl = "90d"

[[sources]]
name = "gotest"
handler_url = "%[1]s/handle"
event_id = "/id"
max_attempts = 2
attempt_timeout = "5s"
backoff = ["50ms"]
signing_secret = %[2]q
result_webhook_url = "%[1]s/results"
result_backoff = ["50ms"]

[[sources]]
name = "byheader"
handler_url = "%[1]s/handle"
event_id = "header:Idempotency-Key"
signing_secret = %[2]q
`, sinkURL, signingSecret)
}

// client is a client of srv with quick retries.
func client(opts ...idem.Option) *idem.Client {
	return idem.New(srv.URL, append([]idem.Option{idem.WithBackoff(20*time.Millisecond, 2*time.Second)}, opts...)...)
}

// namespace is a namespace of the test's own.
func namespace(t *testing.T) string {
	name := strings.ToLower(strings.NewReplacer("/", "-", "_", "-").Replace(t.Name()))
	if len(name) > 50 {
		name = name[:50]
	}
	return fmt.Sprintf("%s-%d", name, nsSeq.Add(1))
}

func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// eventually polls cond every 20 ms until it holds or timeout passes.
func eventually(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %s: %s", timeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// delivery is one request idem sent to the sink.
type delivery struct {
	Path   string
	Header http.Header
	Body   []byte
}

// eventSink is the handler of the "gotest" source: it records every delivery and answers 204,
// or 500 while the event's "fail" is true and it has not been healed.
type eventSink struct {
	mu         sync.Mutex
	deliveries []delivery
	healed     map[string]bool
}

func newEventSink() *eventSink { return &eventSink{healed: map[string]bool{}} }

func (s *eventSink) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	var ev struct {
		ID   string `json:"id"`
		Fail bool   `json:"fail"`
	}
	_ = json.Unmarshal(body, &ev)
	s.mu.Lock()
	s.deliveries = append(s.deliveries, delivery{Path: r.URL.Path, Header: r.Header.Clone(), Body: body})
	fail := r.URL.Path == "/handle" && ev.Fail && !s.healed[ev.ID]
	s.mu.Unlock()
	if fail {
		http.Error(w, "failing on purpose", http.StatusInternalServerError)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *eventSink) heal(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.healed[id] = true
}

// of returns the deliveries to path whose webhook-id is receiptID.
func (s *eventSink) of(path, receiptID string) []delivery {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []delivery
	for _, d := range s.deliveries {
		if d.Path == path && d.Header.Get("Webhook-Id") == receiptID {
			out = append(out, d)
		}
	}
	return out
}

// resultsFor returns the result webhooks about receiptID, parsed, and as received.
func (s *eventSink) resultsFor(receiptID string) ([]map[string]any, []delivery) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []map[string]any
	var raw []delivery
	for _, d := range s.deliveries {
		var m map[string]any
		if d.Path == "/results" && json.Unmarshal(d.Body, &m) == nil && m["receipt_id"] == receiptID {
			out = append(out, m)
			raw = append(raw, d)
		}
	}
	return out, raw
}
