package plugins

import (
	"fmt"
	"math"
	"sort"
	"strings"

	"github.com/BurntSushi/toml"
)

// manifestFile is a plugin's manifest.toml as written.
type manifestFile struct {
	Plugin struct {
		ID          string `toml:"id"`
		Name        string `toml:"name"`
		Version     string `toml:"version"`
		Description string `toml:"description"`
		Enabled     *bool  `toml:"enabled"`
	} `toml:"plugin"`
	Capabilities struct {
		Requires []string `toml:"requires"`
	} `toml:"capabilities"`
	Rules struct {
		Include []string `toml:"include"`
	} `toml:"rules"`
	Settings map[string]settingFile `toml:"settings"`
}

type settingFile struct {
	Type        string   `toml:"type"`
	Default     any      `toml:"default"`
	Min         any      `toml:"min"`
	Max         any      `toml:"max"`
	Options     []string `toml:"options"`
	Description string   `toml:"description"`
}

var settingTypes = []string{"integer", "float", "string", "boolean"}

// parseManifest parses and validates a manifest (its rules are the
// caller's). dirName is the plugin's directory name, which its id must
// match: one name for the plugin on disk, in keys and in the admin API.
func parseManifest(file, dirName, src string) (p *Plugin, errs []error) {
	var f manifestFile
	md, err := toml.Decode(src, &f)
	if err != nil {
		return nil, []error{&LoadError{File: file, Msg: tomlError(err)}}
	}
	bad := func(field, format string, args ...any) {
		errs = append(errs, &LoadError{File: file, Field: field, Msg: fmt.Sprintf(format, args...)})
	}
	for _, k := range md.Undecoded() {
		bad(k.String(), "unknown key")
	}
	pl := f.Plugin
	switch {
	case !md.IsDefined("plugin"):
		bad("plugin", "missing [plugin] table")
	case pl.ID == "":
		bad("plugin.id", "missing")
	case len(pl.ID) > 100 || !idPattern.MatchString(pl.ID):
		bad("plugin.id", "must be kebab-case (a-z, 0-9 and single dashes, at most 100 characters)")
	case pl.ID != dirName:
		bad("plugin.id", "%q must match its directory name %q", pl.ID, clip(dirName))
	}
	p = &Plugin{ID: pl.ID, Name: pl.Name, Version: pl.Version, Description: pl.Description, Enabled: true,
		Settings: map[string]Setting{}}
	if p.Name == "" {
		p.Name = p.ID
	}
	if p.Version == "" {
		p.Version = "1.0.0"
	}
	for _, fv := range []struct{ field, v string }{{"plugin.name", p.Name}, {"plugin.version", p.Version}, {"plugin.description", p.Description}} {
		if len(fv.v) > maxTextField {
			bad(fv.field, "longer than %d bytes", maxTextField)
		}
	}
	if pl.Enabled != nil {
		p.Enabled = *pl.Enabled
	}

	if len(f.Capabilities.Requires) > maxRequires {
		bad("capabilities.requires", "more than %d entries", maxRequires)
	} else {
		seen := map[string]bool{}
		for i, c := range f.Capabilities.Requires {
			switch {
			case !wordPattern.MatchString(c):
				bad(fmt.Sprintf("capabilities.requires[%d]", i), "must be a capability (tool) name")
			case seen[c]:
				bad(fmt.Sprintf("capabilities.requires[%d]", i), "%q listed twice", c)
			default:
				seen[c] = true
				p.Requires = append(p.Requires, c)
			}
		}
	}

	switch inc := f.Rules.Include; {
	case len(inc) == 0:
		bad("rules.include", "names no rule files (e.g. include = [\"rules/*.toml\"])")
	case len(inc) > maxIncludeGlobs:
		bad("rules.include", "more than %d entries", maxIncludeGlobs)
	default:
		for i, g := range inc {
			if err := checkScriptPath(g); err != nil {
				bad(fmt.Sprintf("rules.include[%d]", i), "%v", err)
				continue
			}
			if !within(".", g) {
				bad(fmt.Sprintf("rules.include[%d]", i), "must stay inside the plugin's directory")
				continue
			}
			p.Include = append(p.Include, g)
		}
	}

	if len(f.Settings) > maxSettings {
		bad("settings", "more than %d settings", maxSettings)
		return p, errs
	}
	names := make([]string, 0, len(f.Settings))
	for n := range f.Settings {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		s, serrs := parseSetting(n, f.Settings[n], md)
		for _, e := range serrs {
			bad(e.field, "%s", e.msg)
		}
		if len(serrs) == 0 {
			p.Settings[n] = s
		}
	}
	return p, errs
}

type fieldError struct{ field, msg string }

// parseSetting validates one [settings.<name>] table.
func parseSetting(name string, f settingFile, md toml.MetaData) (s Setting, errs []fieldError) {
	field := "settings." + name
	bad := func(sub, format string, args ...any) {
		fld := field
		if sub != "" {
			fld += "." + sub
		}
		errs = append(errs, fieldError{fld, fmt.Sprintf(format, args...)})
	}
	if !settingNamePattern.MatchString(name) {
		bad("", "name must be lower-case letters, digits and _ (starting with a letter)")
		return s, errs
	}
	s = Setting{Name: name, Type: f.Type, Description: f.Description}
	if len(f.Description) > maxTextField {
		bad("description", "longer than %d bytes", maxTextField)
	}
	known := false
	for _, t := range settingTypes {
		known = known || f.Type == t
	}
	if !known {
		if f.Type == "" {
			bad("type", "missing")
		} else {
			bad("type", "unknown type %q (one of %s)", clip(f.Type), strings.Join(settingTypes, ", "))
		}
		return s, errs
	}
	numeric := f.Type == "integer" || f.Type == "float"
	bound := func(sub string, v any) *float64 {
		if v == nil {
			return nil
		}
		if !numeric {
			bad(sub, "only for integer and float settings")
			return nil
		}
		x, ok := jsonNumber(v)
		if !ok {
			bad(sub, "must be a number")
			return nil
		}
		if f.Type == "integer" && x != math.Trunc(x) {
			bad(sub, "must be an integer")
			return nil
		}
		return &x
	}
	s.Min, s.Max = bound("min", f.Min), bound("max", f.Max)
	if s.Min != nil && s.Max != nil && *s.Min > *s.Max {
		bad("max", "%s is below min %s", fmtNum(*s.Max), fmtNum(*s.Min))
	}
	if f.Options != nil {
		switch {
		case f.Type != "string":
			bad("options", "only for string settings")
		case len(f.Options) == 0:
			bad("options", "empty (leave it out to allow any string)")
		case len(f.Options) > maxOptions:
			bad("options", "more than %d options", maxOptions)
		default:
			for i, o := range f.Options {
				if len(o) > maxSettingString {
					bad(fmt.Sprintf("options[%d]", i), "longer than %d bytes", maxSettingString)
				}
			}
			s.Options = f.Options
		}
	}
	if !md.IsDefined("settings", name, "default") {
		bad("default", "missing")
		return s, errs
	}
	// The default goes through the check a user's value goes through, so
	// a default is always a value a user could have set.
	v, err := s.check(f.Default, true)
	if err != "" {
		bad("default", "%s", err)
		return s, errs
	}
	s.Default = v
	return s, errs
}
