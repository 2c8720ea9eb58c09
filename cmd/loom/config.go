package main

import (
	"io"
	"log/slog"
	"strings"

	"github.com/loomdb/loom/collections"
	"github.com/loomdb/loom/internal/config"
	"github.com/loomdb/loom/triggers"
	"github.com/loomdb/loom/webhooks"
	"github.com/loomdb/loom/webhooks/tools"
)

// This file turns the configuration, which only describes, into what the
// packages take: config imports no feature package, so the joins happen here.

// loadConfig loads the configuration and builds the logger it names, which
// then reports what the file should change (a deprecated section).
func loadConfig(flags config.Flags, getenv func(string) string, stderr io.Writer) (config.Config, *slog.Logger, error) {
	cfg, err := config.Load(flags, getenv)
	if err != nil {
		return config.Config{}, nil, err
	}
	logger := newLogger(stderr, cfg.LogLevel)
	for _, w := range cfg.Warnings {
		logger.Warn(w)
	}
	return cfg, logger, nil
}

// storeIndexes are the engine indexes: the agent runtime's, then those the
// configuration declares, then the trigger outbox's; a duplicate is kept
// once.
func storeIndexes(cfg config.Config) []collections.Index {
	var out []collections.Index
	seen := map[string]bool{}
	for _, set := range [][]collections.Index{webhooks.Indexes, cfg.Indexes, triggers.Indexes} {
		for _, ix := range set {
			key := ix.Collection + "|" + strings.Join(ix.Fields, ",")
			if !seen[key] {
				seen[key] = true
				out = append(out, ix)
			}
		}
	}
	return out
}

// toolDefs converts the [[tool]] entries to the tool registry's definitions.
func toolDefs(entries []config.Tool) []tools.Def {
	defs := make([]tools.Def, len(entries))
	for i, e := range entries {
		defs[i] = tools.Def{
			Name:          e.Name,
			Description:   e.Description,
			InputSchema:   e.InputSchema,
			ExecutionType: e.ExecutionType,
			Visibility:    e.Visibility,
		}
		if x := e.Execution; x != nil {
			defs[i].Execution = &tools.HTTPExecution{
				URL: x.URL, Method: x.Method, Headers: x.Headers, Body: x.Body, Timeout: x.Timeout,
			}
		}
	}
	return defs
}
