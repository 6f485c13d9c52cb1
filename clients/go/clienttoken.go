package idem

// Client tokens (docs/reference/api.md; the contract's "an unknown outcome is not called a
// failure"). A Claim, a ClaimBatch and a Begin carry a client_token chosen once per logical call
// and sent again, unchanged, on every retry of that call: the request body is encoded once, before
// the transport's retry loop. When idem's answer was lost after the write was made (a 503
// outcome-unknown, a dropped connection, a timeout), the retry with the same token is told that the
// claim, or the lease, it finds is its own: Claimed again, or the same lease Token and Fence. A
// token made for one call is never reused for another: that would tell a second call it won what
// the first won.

import (
	"crypto/rand"
	"fmt"
)

// MaxClientTokenLen is the longest client token idem accepts, in bytes (of printable ASCII).
const MaxClientTokenLen = 255

// WithClientToken gives a Claim, ClaimBatch, Begin or Run a client token of the caller's own
// instead of a fresh one: 1 to 255 printable ASCII characters, such as NewClientToken's. Use it to
// carry one logical call's token further than the client's own retries, e.g. saved with a job's
// state and used again after a restart; never give one token to two different calls.
func WithClientToken(token string) CallOption {
	return func(o *callOptions) {
		o.clientToken, o.hasClientToken = token, true
		o.given = append(o.given, "WithClientToken")
	}
}

// NewClientToken returns a fresh client token: a random UUID v4 from crypto/rand, the token every
// Claim, ClaimBatch, Begin and Run makes for itself when given no WithClientToken.
func NewClientToken() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("idem: no random client token: %w", err)
	}
	b[6] = b[6]&0x0f | 0x40 // version 4
	b[8] = b[8]&0x3f | 0x80 // the RFC 4122 variant
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16]), nil
}

// clientTokenOf is the call's token: the one given with WithClientToken, checked as idem checks it,
// or a fresh one.
func (o *callOptions) clientTokenOf() (string, error) {
	if !o.hasClientToken {
		return NewClientToken()
	}
	t := o.clientToken
	if len(t) == 0 || len(t) > MaxClientTokenLen {
		return "", fmt.Errorf("idem: WithClientToken: a client token is 1 to %d characters, not %d", MaxClientTokenLen, len(t))
	}
	for i := 0; i < len(t); i++ {
		if t[i] < 0x20 || t[i] > 0x7e {
			return "", fmt.Errorf("idem: WithClientToken: a client token may contain only printable ASCII")
		}
	}
	return t, nil
}
