package http

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/payrecon/payrecon/reconcile"
)

// checkStrictJSON refuses a JSON body that encoding/json would accept but
// read in a way its sender may not have meant, so that a payment request
// means one thing to everyone who reads it:
//
//   - bytes that are not UTF-8, which encoding/json replaces with U+FFFD;
//   - an escaped lone surrogate ("\ud800"), also read as U+FFFD;
//   - a key repeated in one object ({"amount":1,"amount":300}), of which
//     encoding/json keeps the last, and another parser may keep the first;
//   - in the top-level object, a key that is not exactly one of fields
//     ({"Amount":300}), which encoding/json matches case-insensitively.
//
// It reads the first JSON value of body token by token (json.Decoder.Token)
// and leaves what follows it, and the types of the values, to the
// decoder's own checks. The error is a *reconcile.FieldError that names
// the key (or "body"); nil when body is none of the above. A body that is
// not JSON at all gets a "body" error saying so.
func checkStrictJSON(body []byte, fields []string) *reconcile.FieldError {
	if !utf8.Valid(body) {
		return &reconcile.FieldError{Field: "body", Message: fmt.Sprintf(
			"is not valid UTF-8 (the first bad byte is at offset %d); send JSON in UTF-8", invalidUTF8At(body))}
	}
	if err := checkJSONKeys(body, fields); err != nil {
		return err
	}
	return checkSurrogates(body)
}

// invalidUTF8At returns the offset of the first byte of b that does not
// start a valid UTF-8 sequence, or len(b).
func invalidUTF8At(b []byte) int {
	for i := 0; i < len(b); {
		r, size := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && size <= 1 {
			return i
		}
		i += size
	}
	return len(b)
}

// jsonFrame is one open object or array of the token walk.
type jsonFrame struct {
	object   bool
	wantKey  bool            // in an object: the next string is a key
	keys     map[string]bool // in an object: the keys seen so far
	topLevel bool
}

// checkJSONKeys walks the first JSON value of body and checks the keys of
// its objects: none repeated, and those of the top-level object exactly
// one of fields.
func checkJSONKeys(body []byte, fields []string) *reconcile.FieldError {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber() // a number is not converted, only passed over
	var stack []*jsonFrame
	for {
		tok, err := dec.Token()
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return &reconcile.FieldError{Field: "body", Message: "malformed JSON: " + err.Error()}
		}
		var top *jsonFrame
		if len(stack) > 0 {
			top = stack[len(stack)-1]
		}
		switch tok := tok.(type) {
		case json.Delim:
			switch tok {
			case '{', '[':
				f := &jsonFrame{object: tok == '{', wantKey: tok == '{', topLevel: len(stack) == 0}
				if f.object {
					f.keys = map[string]bool{}
				}
				stack = append(stack, f)
				continue
			default: // '}' or ']'
				stack = stack[:len(stack)-1]
			}
		case string:
			if top != nil && top.object && top.wantKey {
				if fe := checkKey(top, tok, fields); fe != nil {
					return fe
				}
				top.keys[tok] = true
				top.wantKey = false
				continue
			}
		}
		// A value ended: a scalar, or the object or array just closed.
		if len(stack) == 0 {
			return nil
		}
		if parent := stack[len(stack)-1]; parent.object {
			parent.wantKey = true
		}
	}
}

// checkKey checks one key of an object.
func checkKey(obj *jsonFrame, key string, fields []string) *reconcile.FieldError {
	if obj.keys[key] {
		return &reconcile.FieldError{Field: key, Message: "appears more than once in the object; give each field once"}
	}
	if !obj.topLevel || slices.Contains(fields, key) {
		return nil
	}
	for _, f := range fields {
		if strings.EqualFold(f, key) {
			return &reconcile.FieldError{Field: key, Message: fmt.Sprintf("is not a field: field names are case-sensitive; did you mean %q?", f)}
		}
	}
	return &reconcile.FieldError{Field: key, Message: "is not a field: want " + strings.Join(fields, ", ")}
}

// checkSurrogates refuses a \u escape of a UTF-16 surrogate that is not
// part of a pair. body must be valid JSON, in which a backslash occurs
// only inside a string, as the start of an escape.
func checkSurrogates(body []byte) *reconcile.FieldError {
	hex4 := func(i int) (rune, bool) {
		if i+6 > len(body) || body[i] != '\\' || body[i+1] != 'u' {
			return 0, false
		}
		n, err := strconv.ParseUint(string(body[i+2:i+6]), 16, 16)
		return rune(n), err == nil
	}
	for i := 0; i < len(body); i++ {
		if body[i] != '\\' {
			continue
		}
		r, ok := hex4(i)
		if !ok {
			i++ // a one-character escape: skip the escaped character
			continue
		}
		i += 5
		if !utf16.IsSurrogate(r) {
			continue
		}
		if lo, ok := hex4(i + 1); ok && r < 0xdc00 && lo >= 0xdc00 && lo <= 0xdfff {
			i += 6 // a high surrogate and its low one: one character
			continue
		}
		return &reconcile.FieldError{Field: "body", Message: fmt.Sprintf(
			`has an escaped lone UTF-16 surrogate (\u%04x), which is no character`, r)}
	}
	return nil
}
