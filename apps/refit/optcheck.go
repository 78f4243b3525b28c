package main

import (
	"errors"

	"github.com/m2n-dev/m2n/envopts"
	"github.com/m2n-dev/m2n/reshard"
	"github.com/m2n-dev/m2n/session"
)

// checkOptions resolves the session options as Join will and refuses one
// that is not valid naming the flag or the variable it came from, with
// its value (envopts.CheckOptions).
func (f *runFlags) checkOptions(o session.Options) error {
	err := envopts.CheckOptions(o, f.lookup)
	var fe *reshard.FieldError
	var ee *envopts.Error
	if errors.As(err, &fe) || errors.As(err, &ee) {
		return usageError{err}
	}
	return err
}
