package plugins

import "errors"

// Template is a compiled Jinja template (a maintained Jinja2-compatible
// engine, github.com/nikolalohinski/gonja/v2): the seed's messages render
// unchanged, e.g. {{ (context.turn.token_usage * 100) | int }}.
type Template struct {
	src string
}

// maxRender bounds what one rendering may write.
const maxRender = 64 << 10

// compileTemplate parses src (name is where it comes from, for errors).
func compileTemplate(name, src string) (*Template, error) {
	return nil, errors.New("plugins: templates not written yet")
}

// Render renders the template with `context` = c.Map() (m, when the caller
// built it already). Output beyond maxRender is an error.
func (t *Template) Render(m map[string]any) (string, error) {
	return "", errors.New("plugins: templates not written yet")
}
