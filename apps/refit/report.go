package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/m2n-dev/m2n/perf"
)

func printReport(out io.Writer, asJSON bool, rep *perf.RunReport) error {
	return printJSONOr(out, asJSON, rep, func() error { return rep.WriteText(out) })
}

// printJSONOr prints v as one JSON object with asJSON, else its text.
func printJSONOr(out io.Writer, asJSON bool, v any, text func() error) error {
	if asJSON {
		return json.NewEncoder(out).Encode(v)
	}
	return text()
}

// checkFailures turns failed checks into the job's error.
func checkFailures(reps []*perf.RunReport) error {
	var failed []string
	for _, rep := range reps {
		for _, rr := range rep.Routes {
			if strings.HasPrefix(rr.Check, "FAILED") {
				name := rr.Route
				if rep.Stage != nil {
					name = fmt.Sprintf("%s of stage %d", rr.Route, *rep.Stage)
				}
				failed = append(failed, name+": "+strings.TrimPrefix(rr.Check, "FAILED: "))
			}
		}
	}
	if len(failed) > 0 {
		return jobError{fmt.Errorf("check failed on route %s", strings.Join(failed, "; route "))}
	}
	return nil
}
