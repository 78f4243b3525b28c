package main

import (
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/m2n-dev/m2n/envopts"
	"github.com/rs/zerolog"
	"golang.org/x/term"
)

// newLogger returns the logger of one rank: human-readable console output
// when stderr is a terminal, one JSON object a line otherwise (what mpirun
// and srun collect). The level comes from the flag, else M2N_LOG_LEVEL,
// else info.
func newLogger(level string, rank int) (zerolog.Logger, error) {
	src := envopts.Source{Value: level, Name: "--log-level"}
	if level == "" {
		src = envopts.Env("log-level")
	}
	if src.Value == "" {
		src.Value = "info"
	}
	lvl, err := zerolog.ParseLevel(strings.ToLower(src.Value))
	if err != nil || lvl == zerolog.NoLevel {
		return zerolog.Nop(), bad(src, fmt.Errorf("want trace, debug, info, warn, error or disabled"))
	}
	var log zerolog.Logger
	if term.IsTerminal(int(os.Stderr.Fd())) {
		log = zerolog.New(zerolog.ConsoleWriter{Out: os.Stderr, TimeFormat: time.TimeOnly})
	} else {
		log = zerolog.New(os.Stderr)
	}
	return log.Level(lvl).With().Timestamp().Int("rank", rank).Logger(), nil
}
