package main

import (
	"errors"
	"fmt"

	"github.com/m2n-dev/m2n/model"
	"github.com/m2n-dev/m2n/modelspec"
)

// modelLayouts assembles a model's layouts from its flags (package
// modelspec), naming the flag to blame and its value.
func modelLayouts(s modelspec.Spec) (*model.Layouts, error) {
	if s.Scale < 1 {
		return nil, flagError("scale", fmt.Sprint(s.Scale), fmt.Errorf("want at least 1"))
	}
	l, err := s.Layouts()
	var e *modelspec.Error
	switch {
	case err == nil:
		return l, nil
	case !errors.As(err, &e):
		return nil, usageError{err}
	case e.Field == "model" && e.Value == "":
		return nil, usageError{fmt.Errorf("--model is %w", e.Err)}
	case e.Field == "dtype":
		return nil, usageError{fmt.Errorf("--dst-dtype e4m3: %w", e.Err)}
	case e.Field == "fp8":
		return nil, flagError("fp8-scale", e.Value, e.Err)
	case e.Value == "":
		return nil, usageError{fmt.Errorf("--%s: %w", e.Field, e.Err)}
	}
	return nil, flagError(e.Field, e.Value, e.Err)
}
