package model

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// LoadOptions say how Load and FromConfig shape the model they build.
type LoadOptions struct {
	// MTP adds DeepSeek's multi-token-prediction layers (num_nextn_predict_layers
	// of them, as the checkpoint names them: model.layers.<L>.*), which
	// transformers' model does not hold. Off by default; an error for a
	// configuration without them, and for model types other than
	// deepseek_v3 and kimi_k2.
	MTP bool
	// Scale divides the model's widths, head dims and expert count by
	// Scale (head counts stay, so that the real model's head constraints
	// hold); 0 or 1 keeps them, and a size it does not divide is an error.
	Scale int64
	// Layers cuts the model to its first Layers decoder layers
	// (MTP layers stay); 0 keeps them all.
	Layers int
}

// Load returns the model spec names: a built-in model's name
// (Builtins), a HuggingFace config.json (an object with "model_type"), or a
// plain JSON tensor list. Scale, Layers and MTP need a
// configuration: asking for them with a plain list is an error, as is a
// file that cannot be read or parsed (the error names the file).
func Load(spec string, opts LoadOptions) (*Model, error) {
	if c, display, err := lookupBuiltin(spec); err == nil {
		return FromConfig(display, c, opts)
	}
	data, err := os.ReadFile(spec)
	if err != nil {
		if os.IsNotExist(err) && !strings.ContainsAny(spec, `/\.`) {
			return nil, fmt.Errorf("model %q is neither built in (%s) nor a file", spec, strings.Join(Builtins(), ", "))
		}
		return nil, err
	}
	name := strings.TrimSuffix(filepath.Base(spec), ".json")
	if err := objectWithout(data); err != nil {
		return nil, fmt.Errorf("%s: %w", spec, err)
	}
	if isConfig(data) {
		c, err := parseConfig(data)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", spec, err)
		}
		return FromConfig(name, c, opts)
	}
	if opts.Scale > 1 || opts.Layers > 0 || opts.MTP {
		return nil, fmt.Errorf("%s is a tensor list: scaling, cutting layers and MTP need a config.json", spec)
	}
	m, err := parseList(name, data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", spec, err)
	}
	return m, nil
}

// objectWithout reports a JSON object that is neither a config.json (it
// has no model_type) nor a tensor list (it has no "tensors").
func objectWithout(data []byte) error {
	data = bytes.TrimSpace(data)
	if len(data) == 0 || data[0] != '{' {
		return nil
	}
	var probe map[string]json.RawMessage
	if json.Unmarshal(data, &probe) != nil {
		return nil // parseList names the syntax error
	}
	_, mt := probe["model_type"]
	_, ts := probe["tensors"]
	if !mt && !ts {
		return fmt.Errorf("a JSON object with neither model_type (a HuggingFace config.json names it: %s) nor tensors (a tensor list)",
			strings.Join(ModelTypes(), ", "))
	}
	return nil
}

// isConfig reports whether data is a JSON object with a model_type key.
func isConfig(data []byte) bool {
	data = bytes.TrimSpace(data)
	if len(data) == 0 || data[0] != '{' {
		return false
	}
	var probe map[string]json.RawMessage
	if json.Unmarshal(data, &probe) != nil {
		return false
	}
	_, ok := probe["model_type"]
	return ok
}
