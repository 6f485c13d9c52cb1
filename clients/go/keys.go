package idem

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"
)

// The server's limits on a key's parts (docs/reference/api.md#claims).
const (
	MaxParts     = 16
	MaxPartBytes = 1024
)

// KeyRef names a claim or an operation: by key (Key), by parts (Parts) or by its id (ID).
// The zero KeyRef names nothing; calls given it return an error without sending anything.
type KeyRef struct {
	parts []string
	id    string
	byKey bool
}

// Key is the one-part form of a key: Key("k") names the same record as Parts("k").
func Key(key string) KeyRef { return KeyRef{parts: []string{key}, byKey: true} }

// Parts is a key of 1 to 16 parts, each non-empty UTF-8 without NUL and at most 1 KiB.
// Parts("a_b", "c") and Parts("a", "b_c") are different keys.
func Parts(parts ...string) KeyRef { return KeyRef{parts: append([]string(nil), parts...)} }

// ID names a record by its id (the 64 hex digits of ClaimID), for Get and Delete.
func ID(id string) KeyRef { return KeyRef{id: id} }

// String is the key as given: the key, the parts joined by "/", or the id.
func (k KeyRef) String() string {
	if k.id != "" {
		return "id " + k.id
	}
	return strings.Join(k.parts, "/")
}

// resolve computes the record's id, checking the parts as the server would (an id computed from
// parts the server refuses would name nothing).
func (k KeyRef) resolve() (string, error) {
	if k.id != "" {
		return k.id, nil
	}
	if err := k.check(); err != nil {
		return "", err
	}
	return ClaimID(k.parts...), nil
}

func (k KeyRef) check() error {
	if k.id != "" {
		return errors.New("idem: an ID names an existing record; give a Key or Parts here")
	}
	field := "parts"
	if k.byKey {
		field = "key"
	}
	return checkParts(field, k.parts)
}

// body is the key as a request body's members: {"key": …} or {"parts": […]}. The parts are
// checked by the server, whose 400 names the field at fault.
func (k KeyRef) body(into map[string]any) error {
	if k.id != "" {
		return errors.New("idem: an ID names an existing record; give a Key or Parts here")
	}
	if k.parts == nil {
		return errors.New("idem: no key: use idem.Key or idem.Parts")
	}
	if k.byKey {
		into["key"] = k.parts[0]
	} else {
		into["parts"] = k.parts
	}
	return nil
}

// ClaimID is the id idem gives a key: the lowercase hex SHA-256 of the parts joined by a NUL
// byte, computed locally. ClaimID("k") is the id of Key("k"). It does not check the parts; the
// server refuses (and Get and Delete by key return an error for) parts that are empty, contain
// NUL, are over 1 KiB, or number 0 or more than 16.
func ClaimID(parts ...string) string {
	h := sha256.New()
	for i, p := range parts {
		if i > 0 {
			h.Write([]byte{0})
		}
		h.Write([]byte(p))
	}
	return hex.EncodeToString(h.Sum(nil))
}

func checkParts(field string, parts []string) error {
	if len(parts) == 0 {
		return fmt.Errorf("idem: %s: a key needs at least one part", field)
	}
	if len(parts) > MaxParts {
		return fmt.Errorf("idem: %s: at most %d parts, not %d", field, MaxParts, len(parts))
	}
	for i, p := range parts {
		name := field
		if field != "key" {
			name = fmt.Sprintf("%s[%d]", field, i)
		}
		switch {
		case p == "":
			return fmt.Errorf("idem: %s must not be empty", name)
		case strings.IndexByte(p, 0) >= 0:
			return fmt.Errorf("idem: %s must not contain NUL", name)
		case len(p) > MaxPartBytes:
			return fmt.Errorf("idem: %s is %d bytes; at most %d", name, len(p), MaxPartBytes)
		case !utf8.ValidString(p):
			return fmt.Errorf("idem: %s is not valid UTF-8", name)
		}
	}
	return nil
}

// Item is one key of a ClaimBatch or Lookup: Key (the one-part form) or Parts, not both.
// Data and TTL apply to ClaimBatch only.
type Item struct {
	Key   string
	Parts []string
	// Data is stored with the claim: any value encoding/json can marshal (a json.RawMessage is
	// sent as it is), at most 64 KiB of JSON. Nil: none.
	Data any
	// TTL: how long the claim lives (whole seconds, at least 1); 0: the namespace's
	// default_ttl, else never.
	TTL time.Duration
}

func (it Item) ref(field string) (KeyRef, error) {
	switch {
	case it.Key != "" && it.Parts != nil:
		return KeyRef{}, fmt.Errorf("idem: %s: give Key or Parts, not both", field)
	case it.Parts != nil:
		return KeyRef{parts: it.Parts}, nil
	default:
		return KeyRef{parts: []string{it.Key}, byKey: true}, nil
	}
}
