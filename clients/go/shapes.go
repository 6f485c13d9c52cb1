package idem

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
)

// shape is what a call needs of a success answer's body. A 2xx answer without these fields (a
// server that answers `200 {}` or an HTML page to anything) is not idem's: the call returns the
// not-idem *Error naming the URL instead of reading it as a result (Claimed missing is not
// Claimed false).
type shape struct {
	expected string
	fits     func(body []byte) bool
}

// kinds of a field: "string", "boolean", "integer", "array".
func kindFits(raw json.RawMessage, kind string) bool {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return false
	}
	switch kind {
	case "string":
		var s string
		return raw[0] == '"' && json.Unmarshal(raw, &s) == nil
	case "boolean":
		return string(raw) == "true" || string(raw) == "false"
	case "integer":
		var n json.Number
		if json.Unmarshal(raw, &n) != nil || raw[0] == '"' {
			return false
		}
		_, err := n.Int64()
		return err == nil
	case "array":
		return raw[0] == '['
	}
	return false
}

// fields are name, kind pairs, in the order the error names them.
type fields []string

func (f fields) String() string {
	parts := make([]string, 0, len(f)/2)
	for i := 0; i+1 < len(f); i += 2 {
		parts = append(parts, f[i]+": "+f[i+1])
	}
	return "{ " + strings.Join(parts, ", ") + " }"
}

func (f fields) fitObject(body []byte) bool {
	var m map[string]json.RawMessage
	if json.Unmarshal(body, &m) != nil || m == nil {
		return false
	}
	for i := 0; i+1 < len(f); i += 2 {
		if !kindFits(m[f[i]], f[i+1]) {
			return false
		}
	}
	return true
}

// object: an object with these fields, of these kinds (others may be there too).
func object(f ...string) *shape {
	return &shape{expected: fields(f).String(), fits: fields(f).fitObject}
}

// listOf: {name: [item…]}, each item an object with f.
func listOf(name string, f ...string) *shape {
	return &shape{
		expected: fmt.Sprintf("{ %s: [%s, …] }", name, fields(f)),
		fits: func(body []byte) bool {
			var m map[string]json.RawMessage
			if json.Unmarshal(body, &m) != nil || !kindFits(m[name], "array") {
				return false
			}
			var items []json.RawMessage
			if json.Unmarshal(m[name], &items) != nil {
				return false
			}
			for _, item := range items {
				if !fields(f).fitObject(item) {
					return false
				}
			}
			return true
		},
	}
}

// The fields of each answer (docs/reference/api.md). A claim's claimed must be a boolean.
var (
	shapeClaim       = object("claimed", "boolean", "id", "string")
	shapeClaimBatch  = listOf("results", "claimed", "boolean", "id", "string")
	shapeLookup      = listOf("results", "id", "string", "exists", "boolean")
	shapeExists      = object("exists", "boolean")
	shapeClaimRecord = object("id", "string")
	shapeClaimPage   = object("items", "array")
	shapeDeleted     = object("deleted", "integer")
	shapeExtended    = object("lease_expires_at", "string")
	shapeOperation   = object("status", "string", "id", "string")
	shapeReceiptPage = object("receipts", "array")
	shapeReceipt     = object("id", "string", "status", "string")
	shapeReceiptAck  = object("receipt_id", "string", "status", "string")
	shapeMatching    = object("matching", "integer")
	shapeQueued      = object("queued", "integer")
	shapeIntake      = object("receipt_id", "string", "status", "string", "replay", "boolean")

	// A begin's answer: started with its lease token, or completed.
	shapeBegin = &shape{
		expected: `{ status: "started", id: string, token: string } or { status: "completed", id: string, result }`,
		fits: func(body []byte) bool {
			var b struct {
				Status *string `json:"status"`
				ID     *string `json:"id"`
				Token  *string `json:"token"`
			}
			if json.Unmarshal(body, &b) != nil || b.Status == nil || b.ID == nil {
				return false
			}
			return (*b.Status == StatusStarted && b.Token != nil && *b.Token != "") || *b.Status == StatusCompleted
		},
	}
	shapeCompleted = &shape{
		expected: `{ status: "completed", id: string, result }`,
		fits: func(body []byte) bool {
			var b struct {
				Status *string `json:"status"`
				ID     *string `json:"id"`
			}
			return json.Unmarshal(body, &b) == nil && b.Status != nil && *b.Status == StatusCompleted && b.ID != nil
		},
	}
)

// notIdemAnswer is the error of a 2xx answer without the fields the call needs: not idem's answer,
// so not a result either. The not-idem *Error naming the URL, as for an error answer that is not
// an idem problem document.
func notIdemAnswer(req request, base string, res *response, expected string, attempts int) *Error {
	var got string
	switch {
	case len(bytes.TrimSpace(res.body)) == 0:
		got = fmt.Sprintf("with an empty body (expected %s)", expected)
	case !json.Valid(res.body):
		ct := res.header.Get("Content-Type")
		if ct == "" {
			ct = "no Content-Type"
		}
		got = fmt.Sprintf("with a body that is not JSON (%s)", ct)
	default:
		got = fmt.Sprintf("without the fields of idem's answer (expected %s)", expected)
	}
	return &Error{
		Status: res.status, Type: "about:blank", Title: "Invalid response", Method: req.method, Path: req.path,
		Attempts: attempts, NotIdem: true,
		Detail: fmt.Sprintf("%s answered %d %s: it does not look like idem (check the URL given to idem.New, or IDEM_URL)",
			base, res.status, got),
	}
}
