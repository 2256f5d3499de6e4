package http

import (
	"crypto/sha256"
	"crypto/subtle"
)

// tokenDigest is the SHA-256 digest of a secret token: the purchase API's
// client tokens, the operator token, the metrics token.
//
// Every token check compares digests, never the tokens themselves:
// subtle.ConstantTimeCompare returns at once when its inputs differ in
// length, so comparing a guess with the raw token tells the guesser the
// token's length. Digests all have one length, and a guess's digest says
// nothing of the token's.
type tokenDigest [sha256.Size]byte

func digestOf(token string) tokenDigest { return sha256.Sum256([]byte(token)) }

// matchToken is the one token check of the server. It returns the index
// of the digest in digests that the presented token has, or -1 for none.
// It compares the token's digest with every one of digests, each in
// constant time, whether or not an earlier one matched, so that the time
// taken does not depend on which token, if any, was presented.
func matchToken(presented string, digests ...tokenDigest) int {
	sum := digestOf(presented)
	match := -1
	for i := range digests {
		if subtle.ConstantTimeCompare(sum[:], digests[i][:]) == 1 {
			match = i
		}
	}
	return match
}
