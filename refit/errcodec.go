package refit

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/m2n-dev/m2n/reshard"
	"github.com/m2n-dev/m2n/reshard/program"
)

// wireError is an error as it crosses ranks: its text, and the fields of
// the first m2n error type found in its chain.
type wireError struct {
	Msg       string              `json:"msg"`
	Kind      string              `json:"kind,omitempty"`
	Rank      int                 `json:"rank,omitempty"`
	Buffer    *BufferError        `json:"buffer,omitempty"`
	Field     *reshard.FieldError `json:"field,omitempty"`
	View      *program.ViewError  `json:"view,omitempty"`
	Checksum  *ChecksumError      `json:"checksum,omitempty"`
	Timeout   *TimeoutError       `json:"timeout,omitempty"`
	Agreement *AgreementError     `json:"agreement,omitempty"`
	NonFinite *NonFiniteError     `json:"non_finite,omitempty"`
	Left      *LeftError          `json:"left,omitempty"`
	Mismatch  *CallMismatchError  `json:"mismatch,omitempty"`
	Cause     *wireError          `json:"cause,omitempty"`
}

func toWire(err error) *wireError {
	w := &wireError{Msg: err.Error()}
	var (
		ab *AbortError
		ve *ValidationError
		ag *AgreementError
		cs *ChecksumError
		to *TimeoutError
		bu *BufferError
		vi *program.ViewError
		fi *reshard.FieldError
		nf *NonFiniteError
		le *LeftError
		cm *CallMismatchError
	)
	switch {
	case errors.As(err, &ab):
		w.Kind, w.Rank = "abort", ab.Rank
		if ab.Cause != nil {
			w.Cause = toWire(ab.Cause)
		}
	case errors.As(err, &ve):
		w.Kind, w.Rank, w.Msg = "validation", ve.Rank, ve.Msg
		if ve.Err != nil {
			w.Cause = toWire(ve.Err)
		}
	case errors.As(err, &ag):
		w.Kind, w.Agreement = "agreement", ag
	case errors.As(err, &cs):
		w.Kind, w.Checksum = "checksum", cs
	case errors.As(err, &to):
		w.Kind, w.Timeout = "timeout", to
	case errors.As(err, &bu):
		w.Kind, w.Buffer = "buffer", bu
	case errors.As(err, &vi):
		w.Kind, w.View = "view", vi
	case errors.As(err, &fi):
		w.Kind, w.Field = "field", fi
	case errors.As(err, &nf):
		w.Kind, w.NonFinite = "nonfinite", nf
	case errors.As(err, &cm):
		w.Kind, w.Mismatch = "mismatch", cm
	case errors.As(err, &le):
		l := *le
		if l.Cause != nil {
			l.CauseText = l.Cause.Error()
		}
		w.Kind, w.Left = "left", &l
	}
	return w
}

// EncodeError serialises an error so that another rank can rebuild it with
// DecodeError: its text, and its m2n error type with its fields
// (*ValidationError, *AgreementError, *ChecksumError, *TimeoutError,
// *BufferError, *ViewError, *FieldError, *NonFiniteError, *LeftError, *CallMismatchError,
// *AbortError, found with
// errors.As). A nil error encodes as nil.
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

func fromWire(w *wireError) error {
	var typed error
	switch w.Kind {
	case "abort":
		var cause error
		if w.Cause != nil {
			cause = fromWire(w.Cause)
		}
		return &AbortError{Rank: w.Rank, Cause: cause}
	case "validation":
		var cause error
		if w.Cause != nil {
			cause = fromWire(w.Cause)
		}
		return &ValidationError{Rank: w.Rank, Msg: w.Msg, Err: cause}
	case "agreement":
		if w.Agreement != nil {
			typed = w.Agreement
		}
	case "checksum":
		if w.Checksum != nil {
			typed = w.Checksum
		}
	case "timeout":
		if w.Timeout != nil {
			typed = w.Timeout
		}
	case "buffer":
		if w.Buffer != nil {
			typed = w.Buffer
		}
	case "view":
		if w.View != nil {
			typed = w.View
		}
	case "field":
		if w.Field != nil {
			typed = w.Field
		}
	case "nonfinite":
		if w.NonFinite != nil {
			typed = w.NonFinite
		}
	case "left":
		if w.Left != nil {
			typed = w.Left
		}
	case "mismatch":
		if w.Mismatch != nil {
			typed = w.Mismatch
		}
	}
	if typed == nil || typed.Error() == w.Msg {
		if typed == nil {
			return errors.New(w.Msg)
		}
		return typed
	}
	return &decoded{msg: w.Msg, err: typed}
}
