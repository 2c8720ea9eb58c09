package plugins

import (
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"unicode/utf8"
)

// maxSettingString bounds a string setting's value: it reaches every
// context of the plugin and so conditions, templates and prompts.
const maxSettingString = 1024

// maxDisabledRules bounds a user's disabledRules.
const maxDisabledRules = 1000

// maxBadSettingsReported bounds what UserScope reports as dropped.
const maxBadSettingsReported = 20

// check returns v as the setting's Go type (int64, float64, string, bool)
// or says what is wrong with it. fromTOML: v is a manifest's default, where
// an integer must be written as one; a user's JSON number may arrive as
// json.Number, float64 or an integer type, and an integral one is an
// integer.
func (s *Setting) check(v any, fromTOML bool) (any, string) {
	switch s.Type {
	case "boolean":
		b, ok := v.(bool)
		if !ok {
			return nil, "must be a boolean (true or false)"
		}
		return b, ""
	case "string":
		str, ok := v.(string)
		if !ok {
			return nil, "must be a string"
		}
		if len(str) > maxSettingString {
			return nil, fmt.Sprintf("longer than %d bytes", maxSettingString)
		}
		if !utf8.ValidString(str) {
			return nil, "must be valid UTF-8"
		}
		if len(s.Options) > 0 {
			for _, o := range s.Options {
				if str == o {
					return str, ""
				}
			}
			return nil, fmt.Sprintf("%q is not one of the options %v", clip(str), s.Options)
		}
		return str, ""
	case "integer":
		var n int64
		switch x := v.(type) {
		case int64:
			n = x
		case int:
			n = int64(x)
		case int32:
			n = int64(x)
		default:
			if fromTOML {
				return nil, "must be an integer"
			}
			f, ok := jsonNumber(v)
			if !ok {
				return nil, "must be an integer"
			}
			if f != math.Trunc(f) || math.Abs(f) > 1<<53 {
				return nil, fmt.Sprintf("%s is not an integer", fmtNum(f))
			}
			n = int64(f)
		}
		if msg := s.inRange(float64(n)); msg != "" {
			return nil, msg
		}
		return n, ""
	case "float":
		f, ok := jsonNumber(v)
		if !ok {
			return nil, "must be a number"
		}
		if msg := s.inRange(f); msg != "" {
			return nil, msg
		}
		return f, ""
	}
	return nil, "has an unknown type"
}

func (s *Setting) inRange(f float64) string {
	if s.Min != nil && f < *s.Min {
		return fmt.Sprintf("%s is below the minimum %s", fmtNum(f), fmtNum(*s.Min))
	}
	if s.Max != nil && f > *s.Max {
		return fmt.Sprintf("%s is above the maximum %s", fmtNum(f), fmtNum(*s.Max))
	}
	return ""
}

// jsonNumber reads a number as decoded JSON (or TOML) carries it.
func jsonNumber(v any) (float64, bool) {
	var f float64
	switch x := v.(type) {
	case json.Number:
		var err error
		f, err = x.Float64()
		if err != nil {
			return 0, false
		}
	case float64:
		f = x
	case float32:
		f = float64(x)
	case int64:
		f = float64(x)
	case int:
		f = float64(x)
	case int32:
		f = float64(x)
	case uint64:
		f = float64(x)
	default:
		return 0, false
	}
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, false
	}
	return f, true
}

func fmtNum(f float64) string { return strconv.FormatFloat(f, 'f', -1, 64) }

// ValidateUserSettings checks a user's agent settings document:
//
//	{"disabledRules": ["plugin/rule-id", ...],
//	 "plugins": {"<plugin>": {"<setting>": value, ...}}}
//
// Every disabled rule must exist and not be core; every plugin and setting
// must exist and each value have the setting's type and lie within its
// min/max/options. Other top-level fields are the user's own and pass. It
// returns a *SettingError naming the first bad setting.
func (s *Set) ValidateUserSettings(doc map[string]any) error {
	errs := s.readUserSettings(doc, nil, nil)
	if len(errs) > 0 {
		return errs[0]
	}
	return nil
}

// UserScope reads a user's settings document (as ValidateUserSettings takes
// it) into what Evaluate needs: the disabled rules (core ones and unknown
// ones dropped) and the valid overrides (a bad value is dropped, so a
// document written around the check can only fall back to defaults). bad
// lists what was dropped, for a log line: at most maxBadSettingsReported
// entries and a count of the rest, since the runtime logs it on every
// hook and the document's size is the user's.
func (s *Set) UserScope(doc map[string]any) (disabled map[string]bool, settings map[string]map[string]any, bad []string) {
	disabled = map[string]bool{}
	settings = map[string]map[string]any{}
	errs := s.readUserSettings(doc, disabled, settings)
	for i, e := range errs {
		if i == maxBadSettingsReported {
			bad = append(bad, fmt.Sprintf("and %d more", len(errs)-i))
			break
		}
		bad = append(bad, e.Error())
	}
	return disabled, settings, bad
}

// readUserSettings walks doc in a fixed order, filling disabled and
// settings (when not nil) with what is valid and returning what is not.
func (s *Set) readUserSettings(doc map[string]any, disabled map[string]bool, settings map[string]map[string]any) []*SettingError {
	var errs []*SettingError
	bad := func(setting, format string, args ...any) {
		errs = append(errs, &SettingError{Setting: setting, Msg: fmt.Sprintf(format, args...)})
	}
	if raw, ok := doc["disabledRules"]; ok && raw != nil {
		list, ok := stringList(raw)
		switch {
		case !ok:
			bad("disabledRules", "must be a list of rule keys (strings)")
		case len(list) > maxDisabledRules:
			bad("disabledRules", "more than %d entries", maxDisabledRules)
		default:
			for i, key := range list {
				setting := fmt.Sprintf("disabledRules[%d]", i)
				r := s.Rule(key)
				switch {
				case r == nil:
					bad(setting, "no rule %q", clip(key))
				case r.Core:
					bad(setting, "%q is a core rule and cannot be disabled", key)
				default:
					if disabled != nil {
						disabled[key] = true
					}
				}
			}
		}
	}
	raw, ok := doc["plugins"]
	if !ok || raw == nil {
		return errs
	}
	plugins, ok := raw.(map[string]any)
	if !ok {
		bad("plugins", "must be an object of plugin ids to settings")
		return errs
	}
	for _, pid := range slices.Sorted(maps.Keys(plugins)) {
		p := s.Plugin(pid)
		if p == nil {
			bad("plugins."+clip(pid), "no plugin %q", clip(pid))
			continue
		}
		values, ok := plugins[pid].(map[string]any)
		if !ok {
			bad("plugins."+pid, "must be an object of settings")
			continue
		}
		for _, name := range slices.Sorted(maps.Keys(values)) {
			setting := "plugins." + pid + "." + clip(name)
			def, ok := p.Settings[name]
			if !ok {
				bad(setting, "plugin %s has no setting %q", pid, clip(name))
				continue
			}
			v, msg := def.check(values[name], false)
			if msg != "" {
				bad(setting, "%s", msg)
				continue
			}
			if settings != nil {
				if settings[pid] == nil {
					settings[pid] = map[string]any{}
				}
				settings[pid][name] = v
			}
		}
	}
	return errs
}

// stringList reads a JSON array of strings ([]any or []string).
func stringList(v any) ([]string, bool) {
	switch x := v.(type) {
	case []string:
		return x, true
	case []any:
		out := make([]string, len(x))
		for i, e := range x {
			s, ok := e.(string)
			if !ok {
				return nil, false
			}
			out[i] = s
		}
		return out, true
	}
	return nil, false
}
