package webhooks

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/loomdb/loom/collections"
	"github.com/loomdb/loom/webhooks/plugins"
)

// userRuleSettingsPath is the user's agent settings document.
func userRuleSettingsPath(uid string) string { return "users/" + uid + "/" + userRuleSettingsDoc }

// isUserRuleSettingsPath reports whether path is some user's agent settings
// document (users/{uid}/agent-settings/rules).
func isUserRuleSettingsPath(path string) bool {
	s := strings.Split(path, "/")
	return len(s) == 4 && s[0] == "users" && s[1] != "" && s[2]+"/"+s[3] == userRuleSettingsDoc
}

// ValidateWrite checks a write of the document at path as it would be
// stored: a user's agent settings document must name existing rules and
// plugin settings with valid values (*plugins.SettingError). Other paths
// pass, and so does everything when no rules are configured (there is
// nothing to check against; the runtime re-checks when it reads).
func (h *Handlers) ValidateWrite(path string, data map[string]any) error {
	if h.cfg.Rules == nil {
		return nil
	}
	return ValidateUserRuleSettings(h.cfg.Rules.Set(), path, data)
}

// ValidateUserRuleSettings is ValidateWrite against set, for a node that
// checks users' writes without running the runtime (loom serve next to
// loom agents).
func ValidateUserRuleSettings(set *plugins.Set, path string, data map[string]any) error {
	if set == nil || data == nil || !isUserRuleSettingsPath(path) {
		return nil
	}
	if err := tooManySettings(set, data); err != nil {
		return err
	}
	return set.ValidateUserSettings(data)
}

// tooManySettings refuses a document naming more plugins, or more
// settings of a plugin, than there are: one of them is unknown, and the
// full check (which sorts the names and words an error for each) would
// spend tens of milliseconds on a megabyte of them, on every such write.
func tooManySettings(set *plugins.Set, data map[string]any) error {
	plugs, ok := data["plugins"].(map[string]any)
	if !ok {
		return nil // absent, or wrong in a way the full check names cheaply
	}
	if len(plugs) > len(set.Plugins) {
		return &plugins.SettingError{Setting: "plugins",
			Msg: fmt.Sprintf("names %d plugins, more than this server has", len(plugs))}
	}
	for pid, v := range plugs {
		values, ok := v.(map[string]any)
		p := set.Plugin(pid)
		if !ok || p == nil || len(values) <= len(p.Settings) {
			continue // the full check names what is wrong here
		}
		return &plugins.SettingError{Setting: "plugins." + pid,
			Msg: fmt.Sprintf("names %d settings, more than plugin %s has", len(values), pid)}
	}
	return nil
}

// userRuleSettings returns the data of the user's agent settings document
// (nil when there is none). Within one handler invocation (ctx from
// withSettingsMemo) it is read once: the invocation's hooks (on_tool_call
// and on_tool_complete; on_turn_start, on_turn_end and on_session_end)
// share it.
func (h *Handlers) userRuleSettings(ctx context.Context, uid string) (map[string]any, error) {
	memo, _ := ctx.Value(settingsMemoKey{}).(*settingsMemo)
	if memo != nil {
		memo.mu.Lock()
		defer memo.mu.Unlock()
		if data, ok := memo.read[uid]; ok {
			return data, nil
		}
	}
	d, err := h.docs.Get(ctx, userRuleSettingsPath(uid))
	if errors.Is(err, collections.ErrNotFound) {
		err = nil
	}
	if err != nil {
		return nil, fmt.Errorf("read the user's agent settings: %w", err)
	}
	var data map[string]any
	if d != nil {
		data = d.Data
	}
	if memo != nil {
		memo.read[uid] = data
	}
	return data, nil
}

// settingsMemo holds the user settings documents one handler invocation
// read (by user id).
type settingsMemo struct {
	mu   sync.Mutex
	read map[string]map[string]any
}

type settingsMemoKey struct{}

// withSettingsMemo is ctx for one handler invocation: userRuleSettings
// reads each user's settings once in it.
func withSettingsMemo(ctx context.Context) context.Context {
	return context.WithValue(ctx, settingsMemoKey{}, &settingsMemo{read: map[string]map[string]any{}})
}
