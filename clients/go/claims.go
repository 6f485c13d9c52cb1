package idem

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"time"
)

// Record is a stored claim, with the API's fields.
type Record struct {
	Namespace string `json:"namespace"`
	// ID is the lowercase hex SHA-256 of the parts joined by NUL (see ClaimID).
	ID    string   `json:"id"`
	Parts []string `json:"parts"`
	// Data is the claim's data as JSON; nil when it was given none.
	Data      json.RawMessage `json:"data"`
	CreatedAt time.Time       `json:"created_at"`
	// ExpiresAt is nil when the claim never expires.
	ExpiresAt *time.Time `json:"expires_at"`
}

// UnmarshalJSON normalises a JSON null data to nil.
func (r *Record) UnmarshalJSON(b []byte) error {
	type plain Record
	if err := json.Unmarshal(b, (*plain)(r)); err != nil {
		return err
	}
	r.Data = nullToNil(r.Data)
	return nil
}

func nullToNil(m json.RawMessage) json.RawMessage {
	if string(m) == "null" {
		return nil
	}
	return m
}

// DecodeData unmarshals the record's Data into v (which is left alone when there is none).
func (r *Record) DecodeData(v any) error {
	if len(r.Data) == 0 {
		return nil
	}
	return json.Unmarshal(r.Data, v)
}

// ClaimResult is the answer to one claim.
type ClaimResult struct {
	// Claimed is true when this call created the claim; false when it existed already, and Record
	// is then the existing one, unchanged.
	Claimed bool
	Record  Record
}

// UnmarshalJSON reads the API's flat {"claimed", …record} answer.
func (r *ClaimResult) UnmarshalJSON(b []byte) error {
	var flag struct {
		Claimed bool `json:"claimed"`
	}
	if err := json.Unmarshal(b, &flag); err != nil {
		return err
	}
	r.Claimed = flag.Claimed
	return json.Unmarshal(b, &r.Record)
}

// LookupResult is the answer for one key of a Lookup.
type LookupResult struct {
	ID     string  `json:"id"`
	Exists bool    `json:"exists"`
	Record *Record `json:"record"` // nil when !Exists
}

// Claims is the Claims API (docs/reference/api.md#claims): c.Claims.
type Claims struct{ t *transport }

// CallOption is an optional argument of a call: WithData, WithTTL and WithClientToken for Claim;
// WithClientToken for ClaimBatch; WithRequest, WithLease, WithTTL, WithWait, WithHeartbeat and
// WithClientToken for the Operations calls. A call given an option that does not apply to it
// returns an error without sending anything.
type CallOption func(*callOptions)

type callOptions struct {
	data      any
	hasData   bool
	ttl       time.Duration
	request   any
	lease     time.Duration
	wait      time.Duration
	hasWait   bool
	heartbeat time.Duration
	// clientToken is WithClientToken's (see clienttoken.go).
	clientToken    string
	hasClientToken bool
	given          []string
}

// WithData stores v with the claim: any value encoding/json can marshal (a json.RawMessage is
// sent as it is), at most 64 KiB of JSON.
func WithData(v any) CallOption {
	return func(o *callOptions) { o.data, o.hasData = v, true; o.given = append(o.given, "WithData") }
}

// WithTTL: for Claim, how long the claim lives (default: the namespace's default_ttl, else
// never); for Begin and Run, how long the result is kept after completion (default: the
// namespace's default_ttl, else 24 h). Whole seconds, rounded up.
func WithTTL(d time.Duration) CallOption {
	return func(o *callOptions) { o.ttl = d; o.given = append(o.given, "WithTTL") }
}

func collect(what string, allowed []string, opts []CallOption) (*callOptions, error) {
	o := &callOptions{}
	for _, f := range opts {
		f(o)
	}
	for _, name := range o.given {
		ok := false
		for _, a := range allowed {
			ok = ok || a == name
		}
		if !ok {
			return nil, fmt.Errorf("idem: %s does not take %s", what, name)
		}
	}
	return o, nil
}

// seconds is d in whole seconds, rounded up (the API counts in seconds).
func seconds(d time.Duration) int64 {
	s := int64(d / time.Second)
	if d%time.Second != 0 {
		s++
	}
	return s
}

func claimsPath(ns string) string { return "/v1/claims/" + seg(ns) }

// Claim claims a key in namespace ns: Claimed is true when this call created the claim; false
// with the existing record, unchanged, when it existed already. Of any number of concurrent
// claims of one key exactly one is Claimed. Every attempt of the call carries the same client
// token, so a retry after a lost answer is still told Claimed. Options: WithData, WithTTL,
// WithClientToken.
func (c *Claims) Claim(ctx context.Context, ns string, key KeyRef, opts ...CallOption) (*ClaimResult, error) {
	o, err := collect("Claim", []string{"WithData", "WithTTL", "WithClientToken"}, opts)
	if err != nil {
		return nil, err
	}
	body := map[string]any{}
	if err := key.body(body); err != nil {
		return nil, err
	}
	if o.hasData {
		body["data"] = o.data
	}
	if o.ttl != 0 {
		body["ttl_seconds"] = seconds(o.ttl)
	}
	if body["client_token"], err = o.clientTokenOf(); err != nil {
		return nil, err
	}
	var out ClaimResult
	if err := c.t.call(ctx, request{method: "POST", path: claimsPath(ns), json: body, shape: shapeClaim}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// ClaimBatch claims 1 to 10,000 keys in one call; the results are in request order, and of two
// equal keys in one batch the first wins. One bad item refuses the whole batch (a 400 *Error
// whose Field is items[i]…). One client token for the whole call, the same on every attempt: a
// retry after a lost answer is told each item as it was first decided. Option: WithClientToken.
func (c *Claims) ClaimBatch(ctx context.Context, ns string, items []Item, opts ...CallOption) ([]ClaimResult, error) {
	o, err := collect("ClaimBatch", []string{"WithClientToken"}, opts)
	if err != nil {
		return nil, err
	}
	token, err := o.clientTokenOf()
	if err != nil {
		return nil, err
	}
	list := make([]map[string]any, len(items))
	for i, it := range items {
		field := fmt.Sprintf("items[%d]", i)
		ref, err := it.ref(field)
		if err != nil {
			return nil, err
		}
		m := map[string]any{}
		if err := ref.body(m); err != nil {
			return nil, fmt.Errorf("%s: %w", field, err)
		}
		if it.Data != nil {
			m["data"] = it.Data
		}
		if it.TTL != 0 {
			m["ttl_seconds"] = seconds(it.TTL)
		}
		list[i] = m
	}
	var out struct {
		Results []ClaimResult `json:"results"`
	}
	req := request{method: "POST", path: claimsPath(ns) + "/batch", json: map[string]any{"items": list, "client_token": token}, shape: shapeClaimBatch}
	if err := c.t.call(ctx, req, &out); err != nil {
		return nil, err
	}
	if len(out.Results) != len(items) {
		return nil, fmt.Errorf("idem: POST %s: %d results for %d items", req.path, len(out.Results), len(items))
	}
	return out.Results, nil
}

// Lookup looks up 1 to 10,000 keys (their Data and TTL are ignored); the results are in request
// order.
func (c *Claims) Lookup(ctx context.Context, ns string, items []Item) ([]LookupResult, error) {
	list := make([]map[string]any, len(items))
	for i, it := range items {
		field := fmt.Sprintf("items[%d]", i)
		ref, err := it.ref(field)
		if err != nil {
			return nil, err
		}
		m := map[string]any{}
		if err := ref.body(m); err != nil {
			return nil, fmt.Errorf("%s: %w", field, err)
		}
		list[i] = m
	}
	var out struct {
		Results []LookupResult `json:"results"`
	}
	req := request{method: "POST", path: claimsPath(ns) + "/lookup", json: map[string]any{"items": list}, shape: shapeLookup}
	if err := c.t.call(ctx, req, &out); err != nil {
		return nil, err
	}
	if len(out.Results) != len(items) {
		return nil, fmt.Errorf("idem: POST %s: %d results for %d items", req.path, len(out.Results), len(items))
	}
	return out.Results, nil
}

// Exists reports whether a live claim's parts begin with prefix (1 to 16 parts): an index range on
// the server, not a scan. Exists(ctx, "survey", "scenario-1", "user-3") is true once user-3 has
// answered any node of scenario-1. For one exact key, use Get or Lookup.
func (c *Claims) Exists(ctx context.Context, ns string, prefix ...string) (bool, error) {
	var out struct {
		Exists bool `json:"exists"`
	}
	req := request{method: "POST", path: claimsPath(ns) + "/prefix", json: map[string]any{"prefix": prefix}, shape: shapeExists}
	if err := c.t.call(ctx, req, &out); err != nil {
		return false, err
	}
	return out.Exists, nil
}

// ClaimFilter selects the claims of List and Each: those whose parts begin with Prefix.
type ClaimFilter struct {
	// Prefix is 1 to 16 parts: {"scenario-1"}, {"scenario-1", "user-3"}.
	Prefix []string
	// Limit is the page size, 1 to 1000 (0: the server's default, 100).
	Limit int
	// After is the Next of the previous page ("": from the first claim).
	After string
}

// ClaimPage is one page of claims, in the order of their parts.
type ClaimPage struct {
	Items []Record
	// Next is the After of the next page; "" on the last page.
	Next string
}

// prefixQuery is the query of a prefix: the prefix parameter once per part, in order.
func prefixQuery(what string, prefix []string) (url.Values, error) {
	if len(prefix) == 0 {
		return nil, fmt.Errorf("idem: %s needs a prefix of at least one part, such as \"scenario-1\"", what)
	}
	return url.Values{"prefix": prefix}, nil
}

// List returns one page of the live claims whose parts begin with f.Prefix, in the order of their
// parts (each part compared byte by byte, a shorter one first). Give its Next as f.After for the
// following page.
func (c *Claims) List(ctx context.Context, ns string, f ClaimFilter) (*ClaimPage, error) {
	q, err := prefixQuery("List", f.Prefix)
	if err != nil {
		return nil, err
	}
	if f.Limit != 0 {
		q.Set("limit", strconv.Itoa(f.Limit))
	}
	if f.After != "" {
		q.Set("after", f.After)
	}
	var out struct {
		Items []Record `json:"items"`
		Next  *string  `json:"next"`
	}
	if err := c.t.call(ctx, request{method: "GET", path: claimsPath(ns), query: q, shape: shapeClaimPage}, &out); err != nil {
		return nil, err
	}
	page := &ClaimPage{Items: out.Items}
	if out.Next != nil {
		page.Next = *out.Next
	}
	return page, nil
}

// Each calls fn with every live claim whose parts begin with f.Prefix, in the order of their
// parts, fetching page after page (f.Limit a page, from f.After); it stops at the first error,
// fn's or the server's.
func (c *Claims) Each(ctx context.Context, ns string, f ClaimFilter, fn func(Record) error) error {
	for {
		page, err := c.List(ctx, ns, f)
		if err != nil {
			return err
		}
		for _, r := range page.Items {
			if err := fn(r); err != nil {
				return err
			}
		}
		if page.Next == "" || len(page.Items) == 0 {
			return nil
		}
		f.After = page.Next
	}
}

// DeletePrefix deletes every live claim whose parts begin with prefix (at least one part) and
// returns how many it deleted. The server deletes up to 100,000 a call and says when more
// remain: DeletePrefix calls again until none do. DeletePrefix(ctx, "survey", "scenario-1")
// resets a scenario.
func (c *Claims) DeletePrefix(ctx context.Context, ns string, prefix ...string) (int64, error) {
	q, err := prefixQuery("DeletePrefix", prefix)
	if err != nil {
		return 0, err
	}
	var total int64
	for {
		var out struct {
			Deleted int64 `json:"deleted"`
			More    bool  `json:"more"`
		}
		if err := c.t.call(ctx, request{method: "DELETE", path: claimsPath(ns), query: q, shape: shapeDeleted}, &out); err != nil {
			return total, err
		}
		total += out.Deleted
		// A call that deleted nothing cannot have more to delete: never loop on a confused answer.
		if !out.More || out.Deleted == 0 {
			return total, nil
		}
	}
}

// Get returns the live claim of a key (Key, Parts or ID), or nil, nil when there is none.
func (c *Claims) Get(ctx context.Context, ns string, key KeyRef) (*Record, error) {
	id, err := key.resolve()
	if err != nil {
		return nil, err
	}
	var out Record
	err = c.t.call(ctx, request{method: "GET", path: claimsPath(ns) + "/" + seg(id), shape: shapeClaimRecord}, &out)
	if errors.Is(err, ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return &out, nil
}

// Delete deletes the claim of a key (Key, Parts or ID): true when it was deleted, false when there
// was none.
func (c *Claims) Delete(ctx context.Context, ns string, key KeyRef) (bool, error) {
	id, err := key.resolve()
	if err != nil {
		return false, err
	}
	err = c.t.call(ctx, request{method: "DELETE", path: claimsPath(ns) + "/" + seg(id)}, nil)
	if errors.Is(err, ErrNotFound) {
		return false, nil
	}
	return err == nil, err
}
