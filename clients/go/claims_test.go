package idem_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	idem "github.com/idem-dev/idem/clients/go"
)

type vector struct {
	Key   *string  `json:"key"`
	Parts []string `json:"parts"`
	ID    string   `json:"id"`
}

func loadVectors(t *testing.T) []vector {
	t.Helper()
	raw, err := os.ReadFile("../testdata/claim_ids.json")
	if err != nil {
		t.Fatal(err)
	}
	var file struct {
		Vectors []vector `json:"vectors"`
	}
	if err := json.Unmarshal(raw, &file); err != nil {
		t.Fatal(err)
	}
	if len(file.Vectors) < 20 {
		t.Fatalf("only %d vectors in claim_ids.json", len(file.Vectors))
	}
	return file.Vectors
}

// ClaimID against the ids a real server answered (shared with the server's and the other
// clients' tests), then the same keys claimed on this server.
func TestClaimIDVectors(t *testing.T) {
	ctx, c, ns := ctxFor(t), client(), namespace(t)
	for _, v := range loadVectors(t) {
		if got := idem.ClaimID(v.Parts...); got != v.ID {
			t.Errorf("ClaimID(%q) = %s, want %s", v.Parts, got, v.ID)
		}
		key := idem.Parts(v.Parts...)
		if v.Key != nil {
			if got := idem.ClaimID(*v.Key); got != v.ID {
				t.Errorf("ClaimID(%q) = %s, want %s", *v.Key, got, v.ID)
			}
			key = idem.Key(*v.Key)
		}
		r, err := c.Claims.Claim(ctx, ns, key)
		if err != nil {
			t.Fatalf("claim %q: %v", v.Parts, err)
		}
		if r.Record.ID != v.ID || !r.Claimed {
			t.Errorf("claim %q: claimed=%v id %s, want a new claim with id %s", v.Parts, r.Claimed, r.Record.ID, v.ID)
		}
	}
	if idem.ClaimID("a_b", "c") == idem.ClaimID("a", "b_c") {
		t.Error("parts joined without a separator collide")
	}
}

func TestClaim(t *testing.T) {
	ctx, c, ns := ctxFor(t), client(), namespace(t)
	before := time.Now().Add(-time.Second)
	r, err := c.Claims.Claim(ctx, ns, idem.Parts("scenario-1", "user-3", "node-2"), idem.WithData(map[string]any{"answer": "A"}))
	if err != nil {
		t.Fatal(err)
	}
	if !r.Claimed || r.Record.Namespace != ns || r.Record.ID != idem.ClaimID("scenario-1", "user-3", "node-2") {
		t.Fatalf("first claim: %+v", r)
	}
	if strings.Join(r.Record.Parts, "/") != "scenario-1/user-3/node-2" || r.Record.ExpiresAt != nil || r.Record.CreatedAt.Before(before) {
		t.Fatalf("record: %+v", r.Record)
	}
	var data struct{ Answer string }
	if err := r.Record.DecodeData(&data); err != nil || data.Answer != "A" {
		t.Fatalf("data %s: %v %+v", r.Record.Data, err, data)
	}

	again, err := c.Claims.Claim(ctx, ns, idem.Parts("scenario-1", "user-3", "node-2"), idem.WithData("B"))
	if err != nil {
		t.Fatal(err)
	}
	if again.Claimed || string(again.Record.Data) != `{"answer":"A"}` || !again.Record.CreatedAt.Equal(r.Record.CreatedAt) {
		t.Fatalf("second claim must answer the first record unchanged: %+v data %s", again, again.Record.Data)
	}

	// A claim without data has no Data; a key is the one-part form of parts.
	k, err := c.Claims.Claim(ctx, ns, idem.Key("just-a-key"))
	if err != nil || !k.Claimed || k.Record.Data != nil || k.Record.ID != idem.ClaimID("just-a-key") {
		t.Fatalf("key claim: %+v %v", k, err)
	}
	p, err := c.Claims.Claim(ctx, ns, idem.Parts("just-a-key"))
	if err != nil || p.Claimed {
		t.Fatalf("Parts(k) must name the claim of Key(k): %+v %v", p, err)
	}
}

// Of 50 concurrent claims of one key, exactly one is Claimed.
func TestClaimRace(t *testing.T) {
	ctx, c, ns := ctxFor(t), client(), namespace(t)
	var wg sync.WaitGroup
	var mu sync.Mutex
	won := 0
	for i := 0; i < 50; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			r, err := c.Claims.Claim(ctx, ns, idem.Key("contended"), idem.WithData(i))
			if err != nil {
				t.Error(err)
				return
			}
			if r.Claimed {
				mu.Lock()
				won++
				mu.Unlock()
			}
		}(i)
	}
	wg.Wait()
	if won != 1 {
		t.Fatalf("%d claims won, want 1", won)
	}
}

func TestClaimTTL(t *testing.T) {
	ctx, c := ctxFor(t), client()
	ns := namespace(t)
	r, err := c.Claims.Claim(ctx, ns, idem.Key("short"), idem.WithTTL(1500*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	if r.Record.ExpiresAt == nil {
		t.Fatal("a claim WithTTL must expire")
	}
	// 1.5 s is sent as 2 whole seconds.
	if d := r.Record.ExpiresAt.Sub(r.Record.CreatedAt); d != 2*time.Second {
		t.Fatalf("expires %s after creation, want 2s", d)
	}
	eventually(t, 5*time.Second, "the claim expires", func() bool {
		rec, err := c.Claims.Get(ctx, ns, idem.Key("short"))
		return err == nil && rec == nil
	})
	again, err := c.Claims.Claim(ctx, ns, idem.Key("short"))
	if err != nil || !again.Claimed {
		t.Fatalf("an expired claim behaves as absent: %+v %v", again, err)
	}

	// The namespace's default_ttl from the config (ninety_days: 90d).
	d, err := c.Claims.Claim(ctx, "ninety_days", idem.Key(fmt.Sprint(time.Now().UnixNano())))
	if err != nil || d.Record.ExpiresAt == nil || d.Record.ExpiresAt.Sub(d.Record.CreatedAt) != 90*24*time.Hour {
		t.Fatalf("default_ttl: %+v %v", d, err)
	}
}

func TestClaimBatch(t *testing.T) {
	ctx, c, ns := ctxFor(t), client(), namespace(t)
	if _, err := c.Claims.Claim(ctx, ns, idem.Key("https://example.com/old")); err != nil {
		t.Fatal(err)
	}
	items := []idem.Item{
		{Key: "https://example.com/new", Data: map[string]string{"channel": "#news"}},
		{Key: "https://example.com/old"},
		{Parts: []string{"feed", "42"}, TTL: time.Hour},
		{Key: "https://example.com/new", Data: "second"}, // the first of two equal keys wins
	}
	rs, err := c.Claims.ClaimBatch(ctx, ns, items)
	if err != nil {
		t.Fatal(err)
	}
	got := []bool{rs[0].Claimed, rs[1].Claimed, rs[2].Claimed, rs[3].Claimed}
	if fmt.Sprint(got) != "[true false true false]" {
		t.Fatalf("claimed %v", got)
	}
	if string(rs[3].Record.Data) != `{"channel":"#news"}` || rs[0].Record.ID != rs[3].Record.ID {
		t.Fatalf("a repeat in the batch answers the first: %s", rs[3].Record.Data)
	}
	if rs[2].Record.ExpiresAt == nil || rs[2].Record.ExpiresAt.Sub(rs[2].Record.CreatedAt) != time.Hour {
		t.Fatalf("item TTL: %+v", rs[2].Record)
	}

	// 500 at once, in order.
	var many []idem.Item
	for i := 0; i < 500; i++ {
		many = append(many, idem.Item{Key: fmt.Sprintf("https://example.com/a/%d", i)})
	}
	rs, err = c.Claims.ClaimBatch(ctx, ns, many)
	if err != nil || len(rs) != 500 {
		t.Fatalf("%d results, %v", len(rs), err)
	}
	for i, r := range rs {
		if !r.Claimed || r.Record.Parts[0] != many[i].Key {
			t.Fatalf("result %d out of order or not claimed: %+v", i, r)
		}
	}

	// One bad item refuses the whole batch; the 400 names the field.
	_, err = c.Claims.ClaimBatch(ctx, ns, []idem.Item{{Key: "fine"}, {Parts: []string{"x", ""}}})
	var e *idem.Error
	if !errors.As(err, &e) || e.Status != 400 || e.Field != "items[1].parts[1]" {
		t.Fatalf("want a 400 naming items[1].parts[1], got %v", err)
	}
	if rec, _ := c.Claims.Get(ctx, ns, idem.Key("fine")); rec != nil {
		t.Fatal("a refused batch stored an item")
	}
	if _, err := c.Claims.ClaimBatch(ctx, ns, []idem.Item{{Key: "k", Parts: []string{"k"}}}); err == nil {
		t.Fatal("Key and Parts together must be refused")
	}
}

func TestLookupAndExists(t *testing.T) {
	ctx, c, ns := ctxFor(t), client(), namespace(t)
	if _, err := c.Claims.Claim(ctx, ns, idem.Parts("scenario-1", "user-3", "node-2"), idem.WithData(1)); err != nil {
		t.Fatal(err)
	}
	ls, err := c.Claims.Lookup(ctx, ns, []idem.Item{{Parts: []string{"scenario-1", "user-3", "node-2"}}, {Key: "nope"}})
	if err != nil {
		t.Fatal(err)
	}
	if !ls[0].Exists || ls[0].Record == nil || string(ls[0].Record.Data) != "1" || ls[0].ID != idem.ClaimID("scenario-1", "user-3", "node-2") {
		t.Fatalf("lookup[0]: %+v", ls[0])
	}
	if ls[1].Exists || ls[1].Record != nil || ls[1].ID != idem.ClaimID("nope") {
		t.Fatalf("lookup[1]: %+v", ls[1])
	}
	for _, tc := range []struct {
		prefix []string
		want   bool
	}{
		{[]string{"scenario-1", "user-3"}, true},
		{[]string{"scenario-1"}, true},
		{[]string{"scenario-1", "user-3", "node-2"}, true},
		{[]string{"scenario-1", "user-4"}, false},
		{[]string{"scenario-1", "user-3", "node-2", "more"}, false},
		{[]string{"scenario-1", "user"}, false}, // parts, not characters
	} {
		got, err := c.Claims.Exists(ctx, ns, tc.prefix...)
		if err != nil || got != tc.want {
			t.Errorf("Exists(%q) = %v, %v; want %v", tc.prefix, got, err, tc.want)
		}
	}
	if _, err := c.Claims.Exists(ctx, ns); !isStatus(err, 400) {
		t.Errorf("an empty prefix: want 400, got %v", err)
	}
}

func TestGetAndDelete(t *testing.T) {
	ctx, c, ns := ctxFor(t), client(), namespace(t)
	rec, err := c.Claims.Get(ctx, ns, idem.Key("k"))
	if rec != nil || err != nil {
		t.Fatalf("absent: want nil, nil; got %+v, %v", rec, err)
	}
	if _, err := c.Claims.Claim(ctx, ns, idem.Key("k"), idem.WithData([]int{1, 2})); err != nil {
		t.Fatal(err)
	}
	for _, ref := range []idem.KeyRef{idem.Key("k"), idem.Parts("k"), idem.ID(idem.ClaimID("k"))} {
		rec, err = c.Claims.Get(ctx, ns, ref)
		if err != nil || rec == nil || string(rec.Data) != "[1,2]" {
			t.Fatalf("Get(%s): %+v %v", ref, rec, err)
		}
	}
	gone, err := c.Claims.Delete(ctx, ns, idem.Key("k"))
	if err != nil || !gone {
		t.Fatalf("delete: %v %v", gone, err)
	}
	gone, err = c.Claims.Delete(ctx, ns, idem.Key("k"))
	if err != nil || gone {
		t.Fatalf("second delete: want false, nil; got %v %v", gone, err)
	}
	if rec, _ := c.Claims.Get(ctx, ns, idem.Key("k")); rec != nil {
		t.Fatal("deleted claim still there")
	}
	// Parts the server would refuse are refused before anything is sent.
	if _, err := c.Claims.Get(ctx, ns, idem.Parts("a", "")); err == nil || !strings.Contains(err.Error(), "parts[1]") {
		t.Fatalf("want an error naming parts[1], got %v", err)
	}
	if _, err := c.Claims.Get(ctx, ns, idem.ID("not-hex")); !isStatus(err, 400) {
		t.Fatalf("a bad id: want 400, got %v", err)
	}
}

// A client with a wrong base path gets ErrNoRoute from Get and Delete, never "absent".
func TestWrongBasePathIsNoRouteNotAbsent(t *testing.T) {
	ctx, ns := ctxFor(t), namespace(t)
	wrong := idem.New(srv.URL+"/api", idem.WithBackoff(20*time.Millisecond, 2*time.Second))
	rec, err := wrong.Claims.Get(ctx, ns, idem.Key("k"))
	if rec != nil || !errors.Is(err, idem.ErrNoRoute) || errors.Is(err, idem.ErrNotFound) {
		t.Fatalf("Get under a wrong base path: want ErrNoRoute, got %+v, %v", rec, err)
	}
	gone, err := wrong.Claims.Delete(ctx, ns, idem.Key("k"))
	if gone || !errors.Is(err, idem.ErrNoRoute) {
		t.Fatalf("Delete under a wrong base path: want ErrNoRoute, got %v, %v", gone, err)
	}
	if op, err := wrong.Operations.Get(ctx, ns, idem.Key("k")); op != nil || !errors.Is(err, idem.ErrNoRoute) {
		t.Fatalf("Operations.Get under a wrong base path: want ErrNoRoute, got %+v, %v", op, err)
	}
}

func TestInvalidRequests(t *testing.T) {
	ctx, c := ctxFor(t), client()
	_, err := c.Claims.Claim(ctx, "Not A Namespace", idem.Key("k"))
	if !isStatus(err, 400) {
		t.Fatalf("bad namespace: %v", err)
	}
	_, err = c.Claims.Claim(ctx, namespace(t), idem.Parts(strings.Repeat("x", 1025)))
	var e *idem.Error
	if !errors.As(err, &e) || e.Field != "parts[0]" || e.Type != "urn:idem:problem:invalid-request" {
		t.Fatalf("a part over 1 KiB: %#v", err)
	}
	if !strings.Contains(e.Error(), "400") || !strings.Contains(e.Error(), "/v1/claims/") {
		t.Fatalf("the message names the status and call: %s", e)
	}
	if _, err := c.Claims.Claim(ctx, "x", idem.KeyRef{}); err == nil {
		t.Fatal("the zero KeyRef must be refused")
	}
	if _, err := c.Claims.Claim(ctx, "x", idem.Key("k"), idem.WithLease(time.Second)); err == nil || !strings.Contains(err.Error(), "WithLease") {
		t.Fatalf("an option that does not apply must be refused: %v", err)
	}
}

func isStatus(err error, status int) bool {
	var e *idem.Error
	return errors.As(err, &e) && e.Status == status
}
