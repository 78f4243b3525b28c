package control

import (
	"encoding/json"
	"errors"
	"fmt"
	"sync"
)

// wireError is an error as it crosses ranks: its text, and the kind and
// fields of the first typed error found in its chain.
type wireError struct {
	Msg   string          `json:"msg"`
	Kind  string          `json:"kind,omitempty"`
	Rank  int             `json:"rank,omitempty"`
	Typed json.RawMessage `json:"typed,omitempty"` // the typed error's fields
	Cause *wireError      `json:"cause,omitempty"`
}

// errorKind is one typed error the codec carries: find takes it out of a
// chain (errors.As), build makes it again from its fields.
type errorKind struct {
	name  string
	find  func(error) (error, bool)
	build func(json.RawMessage) (error, bool)
}

func kindOf[T any, P interface {
	*T
	error
}](name string) errorKind {
	return errorKind{
		name: name,
		find: func(err error) (error, bool) {
			var p P
			if errors.As(err, &p) {
				return p, true
			}
			return nil, false
		},
		build: func(b json.RawMessage) (error, bool) {
			p := P(new(T))
			if json.Unmarshal(b, p) != nil {
				return nil, false
			}
			return p, true
		},
	}
}

var kinds struct {
	sync.RWMutex
	// registered are the kinds RegisterError added, in its order: tried
	// after the agreement and the timeout, before a peer's leaving (whose
	// cause may be any of them).
	registered []errorKind
}

var (
	agreementKind = kindOf[AgreementError]("agreement")
	timeoutKind   = kindOf[TimeoutError]("timeout")
)

// RegisterError makes EncodeError carry the errors of type *T (found in an
// error's chain with errors.As) with their fields, encoded as JSON under
// kind, and DecodeError make them again, so that errors.As finds them on
// every rank. Package refit registers its errors (*ChecksumError,
// *BufferError, ...) this way; a package registers its own in an init
// function, with a kind of its own.
func RegisterError[T any, P interface {
	*T
	error
}](kind string) {
	kinds.Lock()
	defer kinds.Unlock()
	for _, k := range kinds.registered {
		if k.name == kind {
			panic(fmt.Sprintf("control: error kind %q registered twice", kind))
		}
	}
	kinds.registered = append(kinds.registered, kindOf[T, P](kind))
}

// typedKinds returns the kinds of leaf errors, in the order a chain is
// searched for them.
func typedKinds() []errorKind {
	kinds.RLock()
	defer kinds.RUnlock()
	return append([]errorKind{agreementKind, timeoutKind}, kinds.registered...)
}

func toWire(err error) *wireError {
	w := &wireError{Msg: err.Error()}
	var (
		ab *AbortError
		ve *ValidationError
		le *LeftError
	)
	switch {
	case errors.As(err, &ab):
		w.Kind, w.Rank = "abort", ab.Rank
		if ab.Cause != nil {
			w.Cause = toWire(ab.Cause)
		}
		return w
	case errors.As(err, &ve):
		w.Kind, w.Rank, w.Msg = "validation", ve.Rank, ve.Msg
		if ve.Err != nil {
			w.Cause = toWire(ve.Err)
		}
		return w
	}
	for _, k := range typedKinds() {
		if typed, ok := k.find(err); ok {
			if b, jerr := json.Marshal(typed); jerr == nil {
				w.Kind, w.Typed = k.name, b
				return w
			}
		}
	}
	if errors.As(err, &le) {
		l := *le
		if l.Cause != nil {
			l.CauseText = l.Cause.Error()
		}
		if b, jerr := json.Marshal(&l); jerr == nil {
			w.Kind, w.Typed = "left", b
		}
	}
	return w
}

// EncodeError serialises an error so that another rank can rebuild it with
// DecodeError: its text, and its m2n error type with its fields
// (*ValidationError, *AgreementError, *TimeoutError, *LeftError,
// *AbortError and the types RegisterError added, found with errors.As). A
// nil error encodes as nil.
func EncodeError(err error) []byte {
	if err == nil {
		return nil
	}
	b, jerr := json.Marshal(toWire(err))
	if jerr != nil {
		b, _ = json.Marshal(&wireError{Msg: err.Error()})
	}
	return b
}

// DecodeError rebuilds an error from EncodeError: the same text, and where
// the original carried an m2n error type, that type, so that errors.As
// matches it; the text stays the original's. Empty input decodes as nil;
// input that is not an encoded error decodes as an error quoting it.
func DecodeError(b []byte) error {
	if len(b) == 0 {
		return nil
	}
	var w wireError
	if err := json.Unmarshal(b, &w); err != nil {
		return fmt.Errorf("refit: an undecodable error from a peer: %q", b)
	}
	return fromWire(&w)
}

// decoded is a typed error that keeps the original's text.
type decoded struct {
	msg string
	err error
}

func (d *decoded) Error() string { return d.msg }
func (d *decoded) Unwrap() error { return d.err }

var leftKind = kindOf[LeftError]("left")

func fromWire(w *wireError) error {
	var cause error
	if w.Cause != nil {
		cause = fromWire(w.Cause)
	}
	switch w.Kind {
	case "abort":
		return &AbortError{Rank: w.Rank, Cause: cause}
	case "validation":
		return &ValidationError{Rank: w.Rank, Msg: w.Msg, Err: cause}
	}
	var typed error
	if w.Kind != "" && len(w.Typed) > 0 {
		for _, k := range append(typedKinds(), leftKind) {
			if k.name == w.Kind {
				typed, _ = k.build(w.Typed)
				break
			}
		}
	}
	if typed == nil {
		return errors.New(w.Msg)
	}
	if typed.Error() == w.Msg {
		return typed
	}
	return &decoded{msg: w.Msg, err: typed}
}
