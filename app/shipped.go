package app

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/http"
	"net/url"

	"github.com/loomdb/loom"
	"github.com/loomdb/loom/internal/config"
	"github.com/loomdb/loom/internal/ssrf"
	"github.com/loomdb/loom/rules"
)

// Loom ships its default security rules and the agent runtime's triggers
// inside the binary, so `loom serve` behaves the same from any directory.
// For each, a file named by flag, env or config wins; else the file in the
// working directory, when present (users edit those); else the built-in
// copy. Startup logs which was used.

// builtin is how logs name the copy built into the binary.
const builtin = "built-in"

// loadRules compiles the security rules file. The default file may be
// absent: then the built-in rules apply, returned as a nil Set with
// optional set (the server keeps the built-in rules until a reload finds
// the file, so a user can create it without a restart). A file named in
// the configuration must exist. A bad file refuses to start, naming the
// rule and the error.
func loadRules(cfg config.Config, logger *slog.Logger) (set *rules.Set, file string, optional bool, err error) {
	set, err = rules.Load(cfg.Security.RulesFile)
	if err == nil {
		logger.Info("security rules loaded", "file", cfg.Security.RulesFile, "rules", set.Len())
		return set, cfg.Security.RulesFile, false, nil
	}
	if errors.Is(err, fs.ErrNotExist) && cfg.Security.RulesFile == config.DefaultRulesFile {
		logger.Info("security rules loaded", "file", builtin, "rules", rules.Default().Len(), "absent", cfg.Security.RulesFile)
		return nil, cfg.Security.RulesFile, true, nil
	}
	return nil, "", false, fmt.Errorf("security rules: %w", err)
}

// triggersSource picks the triggers: the file config.Load found (flag, env,
// or ./triggers.json when present); else, while this server serves the
// agent runtime, the shipped triggers that drive its handlers; else none.
// Without the handlers the shipped triggers would only deliver to 404s.
func triggersSource(cfg config.Config) (file string, shipped []byte) {
	if cfg.Triggers == "" && agentsEnabled(cfg) {
		return "", loom.Triggers()
	}
	return cfg.Triggers, nil
}

// triggersName names the triggers triggersSource picked, for logs.
func triggersName(file string, shipped []byte) string {
	switch {
	case file != "":
		return file
	case shipped != nil:
		return builtin
	}
	return "none"
}

// selfTransport carries the deliveries of the built-in handlers' triggers
// (those under base + "/webhooks/") to this server at base (LOOM_URL). It
// allows base's host, usually loopback, which the [webhooks] allow list
// need not open: opened there, it would be open to every trigger.
func selfTransport(base string) (http.RoundTripper, error) {
	u, err := url.Parse(base)
	if err != nil || u.Hostname() == "" {
		return nil, fmt.Errorf("LOOM_URL %q is not an absolute URL", base)
	}
	guard, err := ssrf.New([]string{u.Hostname()}, nil)
	if err != nil {
		return nil, err
	}
	return guard.Transport(), nil
}
