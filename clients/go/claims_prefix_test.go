package idem_test

// Listing and deleting a prefix (docs/reference/api.md#claims) against the real server; and, on a
// tiny fake server, a server that is not idem (an HTML 404) and a deletion that takes more than
// one call (more: true). Also IDEM_URL / IDEM_TOKEN, and the timestamps' forms.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	idem "github.com/idem-dev/idem/clients/go"
)

// prefixFixture claims 25 claims under scenario-1 (5 users × 5 nodes, out of order) and
// neighbours that must stay in ns, and the same 25 in ns+"-other"; it returns the 25 in the
// server's order.
func prefixFixture(t *testing.T, ctx context.Context, c *idem.Client, ns string) (mine [][]string, neighbours [][]string) {
	t.Helper()
	for _, u := range []int{4, 1, 5, 3, 2} {
		for _, n := range []int{3, 5, 1, 4, 2} {
			mine = append(mine, []string{"scenario-1", fmt.Sprintf("user-%d", u), fmt.Sprintf("node-%d", n)})
		}
	}
	neighbours = [][]string{{"scenario-10", "user-1", "node-1"}, {"scenario-2", "user-1", "node-1"}, {"scenario-0", "user-9"}}
	var items, others []idem.Item
	for i, p := range append(append([][]string{}, mine...), neighbours...) {
		items = append(items, idem.Item{Parts: p, Data: map[string]int{"i": i}})
	}
	for _, p := range mine {
		others = append(others, idem.Item{Parts: p})
	}
	if _, err := c.Claims.ClaimBatch(ctx, ns, items); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Claims.ClaimBatch(ctx, ns+"-other", others); err != nil {
		t.Fatal(err)
	}
	// The server's order: each part followed by NUL, compared byte by byte.
	key := func(p []string) string { return strings.Join(p, "\x00") + "\x00" }
	sort.Slice(mine, func(i, j int) bool { return key(mine[i]) < key(mine[j]) })
	return mine, neighbours
}

func partsOf(rs []idem.Record) [][]string {
	out := make([][]string, len(rs))
	for i, r := range rs {
		out[i] = r.Parts
	}
	return out
}

// List pages through a prefix in parts order; Next leads to the following page and is "" on the last.
func TestListPagesInPartsOrder(t *testing.T) {
	ctx, ns, c := ctxFor(t), namespace(t), client()
	mine, _ := prefixFixture(t, ctx, c, ns)
	var pages []*idem.ClaimPage
	f := idem.ClaimFilter{Prefix: []string{"scenario-1"}, Limit: 10}
	for {
		page, err := c.Claims.List(ctx, ns, f)
		if err != nil {
			t.Fatal(err)
		}
		pages = append(pages, page)
		if page.Next == "" {
			break
		}
		f.After = page.Next
	}
	var listed []idem.Record
	var sizes []int
	for _, p := range pages {
		listed = append(listed, p.Items...)
		sizes = append(sizes, len(p.Items))
	}
	if !reflect.DeepEqual(sizes, []int{10, 10, 5}) {
		t.Fatalf("page sizes %v, want [10 10 5]", sizes)
	}
	if got := partsOf(listed); !reflect.DeepEqual(got, mine) {
		t.Fatalf("not in parts order:\n got %v\nwant %v", got, mine)
	}
	for _, r := range listed {
		var data struct{ I *int }
		if r.Namespace != ns || r.ID != idem.ClaimID(r.Parts...) || r.DecodeData(&data) != nil || data.I == nil || r.CreatedAt.IsZero() {
			t.Fatalf("record %+v", r)
		}
	}

	user3, err := c.Claims.List(ctx, ns, idem.ClaimFilter{Prefix: []string{"scenario-1", "user-3"}})
	if err != nil || user3.Next != "" || len(user3.Items) != 5 || user3.Items[0].Parts[2] != "node-1" || user3.Items[4].Parts[2] != "node-5" {
		t.Fatalf("%+v %v", user3, err)
	}
	if none, err := c.Claims.List(ctx, ns, idem.ClaimFilter{Prefix: []string{"scenario-1", "user-30"}}); err != nil || len(none.Items) != 0 || none.Next != "" {
		t.Fatalf("%+v %v", none, err)
	}
	_, err = c.Claims.List(ctx, ns, idem.ClaimFilter{Prefix: []string{"scenario-1"}, Limit: 1001})
	var e *idem.Error
	if !errors.As(err, &e) || e.Status != 400 || e.Field != "limit" || errors.Is(err, idem.ErrNotIdem) {
		t.Fatalf("limit 1001: %#v", err)
	}
	if _, err := c.Claims.List(ctx, ns, idem.ClaimFilter{}); err == nil || !strings.Contains(err.Error(), "at least one part") {
		t.Fatalf("no prefix: %v", err)
	}
}

// Each visits every claim under the prefix in parts order, across pages, and stops at fn's error.
func TestEachAcrossPages(t *testing.T) {
	ctx, ns, c := ctxFor(t), namespace(t), client()
	mine, _ := prefixFixture(t, ctx, c, ns)
	var seen [][]string
	err := c.Claims.Each(ctx, ns, idem.ClaimFilter{Prefix: []string{"scenario-1"}, Limit: 7}, func(r idem.Record) error {
		seen = append(seen, r.Parts)
		return nil
	})
	if err != nil || !reflect.DeepEqual(seen, mine) {
		t.Fatalf("%v\n got %v\nwant %v", err, seen, mine)
	}
	stop := errors.New("enough")
	n := 0
	err = c.Claims.Each(ctx, ns, idem.ClaimFilter{Prefix: []string{"scenario-1"}, Limit: 7}, func(idem.Record) error {
		if n++; n == 9 {
			return stop
		}
		return nil
	})
	if err != stop || n != 9 {
		t.Fatalf("fn's error ends Each: %v after %d", err, n)
	}
}

// DeletePrefix with 2 parts, then 1: other prefixes and namespaces keep their claims.
func TestDeletePrefix(t *testing.T) {
	ctx, ns, c := ctxFor(t), namespace(t), client()
	mine, neighbours := prefixFixture(t, ctx, c, ns)
	exists := func(ns string, prefix ...string) bool {
		ok, err := c.Claims.Exists(ctx, ns, prefix...)
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}
	if n, err := c.Claims.DeletePrefix(ctx, ns, "scenario-1", "user-3"); n != 5 || err != nil {
		t.Fatalf("2 parts: %d, %v", n, err)
	}
	if exists(ns, "scenario-1", "user-3") || !exists(ns, "scenario-1", "user-2") {
		t.Fatal("only user-3's claims go")
	}
	if n, err := c.Claims.DeletePrefix(ctx, ns, "scenario-1"); n != 20 || err != nil {
		t.Fatalf("1 part: %d, %v", n, err)
	}
	if n, err := c.Claims.DeletePrefix(ctx, ns, "scenario-1"); n != 0 || err != nil {
		t.Fatalf("again: %d, %v", n, err)
	}
	for _, p := range neighbours {
		if !exists(ns, p...) {
			t.Fatalf("%v was deleted", p)
		}
	}
	var other int
	if err := c.Claims.Each(ctx, ns+"-other", idem.ClaimFilter{Prefix: []string{"scenario-1"}}, func(idem.Record) error { other++; return nil }); err != nil || other != 25 {
		t.Fatalf("another namespace keeps its claims: %d, %v", other, err)
	}
	if r, err := c.Claims.Claim(ctx, ns, idem.Parts(mine[0]...)); err != nil || !r.Claimed {
		t.Fatalf("claimable again once deleted: %+v, %v", r, err)
	}
	if _, err := c.Claims.DeletePrefix(ctx, ns); err == nil {
		t.Fatal("DeletePrefix with no parts must fail before sending")
	}
}

// A server that is not idem (an HTML 404): an *Error with its status that says so.
func TestNotIdem(t *testing.T) {
	s, _ := fakeIdem(t, func(i int, w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.WriteHeader(404)
		fmt.Fprint(w, "<html><body><h1>Not Found</h1></body></html>")
	})
	c := idem.New(s.URL, idem.WithRetries(0))
	ctx := context.Background()
	calls := map[string]func() error{
		"Claim": func() error { _, err := c.Claims.Claim(ctx, "survey", idem.Key("k")); return err },
		"Get":   func() error { _, err := c.Claims.Get(ctx, "survey", idem.Key("k")); return err },
		"List": func() error {
			_, err := c.Claims.List(ctx, "survey", idem.ClaimFilter{Prefix: []string{"a"}})
			return err
		},
		"DeletePrefix": func() error { _, err := c.Claims.DeletePrefix(ctx, "survey", "a"); return err },
	}
	want := regexp.MustCompile(`^idem: \w+ /v1/claims/survey\S*: 404 Not Found: ` + regexp.QuoteMeta(s.URL) +
		` answered 404 without an idem problem document: it does not look like idem \(check the URL given to idem\.New, or IDEM_URL\)$`)
	for name, call := range calls {
		err := call()
		var e *idem.Error
		if !errors.As(err, &e) || e.Status != 404 || !e.NotIdem || !errors.Is(err, idem.ErrNotIdem) || errors.Is(err, idem.ErrNotFound) {
			t.Fatalf("%s: %#v", name, err)
		}
		if !want.MatchString(err.Error()) {
			t.Fatalf("%s: %s", name, err)
		}
	}
}

// DeletePrefix calls again while the answer says more: true, and sums what was deleted.
func TestDeletePrefixWhileMore(t *testing.T) {
	answers := []string{`{"deleted":100000,"more":true}`, `{"deleted":100000,"more":true}`, `{"deleted":42,"more":false}`}
	var mu sync.Mutex
	var seen []string
	s, n := fakeIdem(t, func(i int, w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.Method+" "+r.URL.RequestURI())
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		if i < len(answers) {
			fmt.Fprint(w, answers[i])
			return
		}
		fmt.Fprint(w, `{"deleted":0,"more":false}`)
	})
	got, err := idem.New(s.URL, idem.WithRetries(0)).Claims.DeletePrefix(context.Background(), "survey", "scenario 1", "user/3")
	if err != nil || got != 200042 || n.Load() != 3 {
		t.Fatalf("%d, %v, %d calls", got, err, n.Load())
	}
	for _, r := range seen {
		if r != "DELETE /v1/claims/survey?prefix=scenario+1&prefix=user%2F3" {
			t.Fatalf("request %q", r)
		}
	}
}

// New("") is IDEM_URL, else DefaultURL; without WithToken, IDEM_TOKEN is the token.
func TestEnvURLAndToken(t *testing.T) {
	var mu sync.Mutex
	var auth []string
	s, _ := fakeIdem(t, func(i int, w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		auth = append(auth, r.Header.Get("Authorization"))
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"exists":true}`)
	})
	t.Setenv("IDEM_URL", s.URL)
	t.Setenv("IDEM_TOKEN", "env-t0ken")
	ctx := context.Background()
	for _, c := range []*idem.Client{idem.New(""), idem.New("", idem.WithToken("given")), idem.New("", idem.WithToken(""))} {
		if ok, err := c.Claims.Exists(ctx, "ns", "a"); err != nil || !ok {
			t.Fatalf("%v: %v %v", c, ok, err)
		}
	}
	if !reflect.DeepEqual(auth, []string{"Bearer env-t0ken", "Bearer given", ""}) {
		t.Fatalf("Authorization headers %q", auth)
	}
	if got := idem.New("").String(); got != fmt.Sprintf("idem.Client(%s, with a token)", s.URL) {
		t.Fatalf("%s", got)
	}
	t.Setenv("IDEM_URL", "127.0.0.1:7070")
	if _, err := idem.New("").Claims.Exists(ctx, "ns", "a"); err == nil || !strings.Contains(err.Error(), "URL (IDEM_URL) must be http://") {
		t.Fatalf("a bad IDEM_URL: %v", err)
	}
	t.Setenv("IDEM_URL", "")
	t.Setenv("IDEM_TOKEN", "")
	if got := idem.New("").String(); got != "idem.Client("+idem.DefaultURL+")" {
		t.Fatalf("%s", got)
	}
}

// Timestamps: the six digits idem writes now, and older answers' fewer digits or none, all read.
func TestTimestampForms(t *testing.T) {
	for raw, want := range map[string]time.Time{
		"2026-11-18T11:06:40.123000Z": time.Date(2026, 11, 18, 11, 6, 40, 123000000, time.UTC),
		"2026-11-18T11:06:40.9Z":      time.Date(2026, 11, 18, 11, 6, 40, 900000000, time.UTC),
		"2026-11-18T11:06:40Z":        time.Date(2026, 11, 18, 11, 6, 40, 0, time.UTC),
	} {
		body := fmt.Sprintf(`{"namespace":"ns","id":"x","parts":["k"],"data":null,"created_at":%q,"expires_at":%[1]q}`, raw)
		var r idem.Record
		if err := json.Unmarshal([]byte(body), &r); err != nil || !r.CreatedAt.Equal(want) || r.ExpiresAt == nil || !r.ExpiresAt.Equal(want) {
			t.Fatalf("Record %s: %v, %v", raw, r.CreatedAt, err)
		}
		var op idem.Operation
		if err := json.Unmarshal([]byte(fmt.Sprintf(`{"status":"started","id":"x","lease_expires_at":%q}`, raw)), &op); err != nil ||
			op.LeaseExpiresAt == nil || !op.LeaseExpiresAt.Equal(want) {
			t.Fatalf("Operation %s: %+v, %v", raw, op, err)
		}
		var rc idem.Receipt
		if err := json.Unmarshal([]byte(fmt.Sprintf(`{"id":"rcpt_1","created_at":%q,"updated_at":%[1]q,"attempts":[{"n":1,"started_at":%[1]q}]}`, raw)), &rc); err != nil ||
			!rc.CreatedAt.Equal(want) || !rc.Attempts[0].StartedAt.Equal(want) {
			t.Fatalf("Receipt %s: %+v, %v", raw, rc, err)
		}
	}
	// And what the server writes today: six digits and Z, read by the client to the microsecond.
	ctx, ns := ctxFor(t), namespace(t)
	r, err := client().Claims.Claim(ctx, ns, idem.Key("k"), idem.WithTTL(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	res, err := http.Get(srv.URL + "/v1/claims/" + ns + "/" + r.Record.ID)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var wire struct {
		CreatedAt string `json:"created_at"`
		ExpiresAt string `json:"expires_at"`
	}
	if err := json.NewDecoder(res.Body).Decode(&wire); err != nil {
		t.Fatal(err)
	}
	six := regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$`)
	if !six.MatchString(wire.CreatedAt) || !six.MatchString(wire.ExpiresAt) {
		t.Fatalf("the server wrote %q and %q", wire.CreatedAt, wire.ExpiresAt)
	}
	if got := r.Record.CreatedAt.UTC().Format("2006-01-02T15:04:05.000000Z"); got != wire.CreatedAt {
		t.Fatalf("the client read %s as %s", wire.CreatedAt, got)
	}
}
