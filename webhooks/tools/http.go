package tools

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"time"
)

// StatusError is the error of an http tool whose endpoint answered with a
// non-2xx status. Body is the (truncated) response body, parsed as JSON when
// the response is JSON.
type StatusError struct {
	Tool   string
	Status int
	Body   any
}

func (e *StatusError) Error() string {
	msg := fmt.Sprintf("%s: HTTP %d %s", e.Tool, e.Status, http.StatusText(e.Status))
	var body string
	switch b := e.Body.(type) {
	case string:
		body = b
	case nil:
	default:
		if j, err := json.Marshal(b); err == nil {
			body = string(j)
		}
	}
	if body = strings.TrimSpace(body); body != "" {
		if len(body) > 500 {
			body = text([]byte(body[:500])) + "…"
		}
		msg += ": " + body
	}
	return msg
}

// templateRE matches {{input.a.b}} (spaces inside the braces allowed).
var templateRE = regexp.MustCompile(`\{\{\s*input((?:\.[A-Za-z0-9_-]+)+)\s*\}\}`)

// checkTemplate refuses "{{" that is not a well-formed {{input.field}}.
func checkTemplate(what, s string) error {
	if strings.Contains(templateRE.ReplaceAllString(s, ""), "{{") {
		return fmt.Errorf("%s: templates must look like {{input.field}} or {{input.a.b}}", what)
	}
	return nil
}

var headerNameRE = regexp.MustCompile("^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")

// httpTool validates d's execution and returns its runner.
func httpTool(d Def, transport http.RoundTripper) (runFunc, error) {
	ex := d.Execution
	if ex == nil || strings.TrimSpace(ex.URL) == "" {
		return nil, errors.New("http tool needs execution.url")
	}
	if err := checkExecURL(ex.URL); err != nil {
		return nil, err
	}
	method, err := execMethod(ex.Method)
	if err != nil {
		return nil, err
	}
	if method == http.MethodGet && ex.Body != "" {
		return nil, errors.New("execution.body is not allowed with GET")
	}
	if err := checkTemplate("execution.body", ex.Body); err != nil {
		return nil, err
	}
	if err := checkExecHeaders(ex.Headers); err != nil {
		return nil, err
	}
	timeout, err := execTimeout(ex.Timeout)
	if err != nil {
		return nil, err
	}
	t := &httpCall{
		name: d.Name, ex: ex, method: method, timeout: timeout,
		jsonBody: bodyIsJSON(ex), client: newClient(transport),
	}
	return t.run, nil
}

// checkExecURL refuses a URL template that is malformed or, with its
// templates filled in, not an absolute http(s) URL.
func checkExecURL(rawURL string) error {
	if err := checkTemplate("execution.url", rawURL); err != nil {
		return err
	}
	u, err := url.Parse(templateRE.ReplaceAllString(rawURL, "x"))
	if err != nil {
		return fmt.Errorf("execution.url: %v", err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("execution.url %q: must be an absolute http or https URL", rawURL)
	}
	return nil
}

// execMethod is the HTTP method of execution.method (GET when empty).
func execMethod(m string) (string, error) {
	method := strings.ToUpper(m)
	switch method {
	case "":
		return http.MethodGet, nil
	case http.MethodGet, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete:
		return method, nil
	default:
		return "", fmt.Errorf("execution.method %q: use GET, POST, PUT, PATCH or DELETE", m)
	}
}

// checkExecHeaders refuses invalid header names and values that are not
// one line or hold a malformed template.
func checkExecHeaders(headers map[string]string) error {
	for k, v := range headers {
		if !headerNameRE.MatchString(k) {
			return fmt.Errorf("execution.headers: invalid header name %q", k)
		}
		if strings.ContainsAny(v, "\r\n") {
			return fmt.Errorf("execution.headers[%s]: value must be one line", k)
		}
		if err := checkTemplate("execution.headers["+k+"]", v); err != nil {
			return err
		}
	}
	return nil
}

// execTimeout is the timeout of execution.timeout in milliseconds (0: the
// default).
func execTimeout(ms int) (time.Duration, error) {
	switch {
	case ms < 0 || ms > MaxHTTPTimeoutMillis:
		return 0, fmt.Errorf("execution.timeout %d: must be between 1 and %d milliseconds (0: default %d)", ms, MaxHTTPTimeoutMillis, DefaultHTTPTimeout.Milliseconds())
	case ms > 0:
		return time.Duration(ms) * time.Millisecond, nil
	default:
		return DefaultHTTPTimeout, nil
	}
}

// bodyIsJSON tells whether the request body is JSON: the default body (the
// args), a JSON Content-Type, or, without a Content-Type, a template that
// starts as an object or an array. Its substitutions are escaped to match.
func bodyIsJSON(ex *HTTPExecution) bool {
	return ex.Body == "" || isJSONType(headerValue(ex.Headers, "Content-Type")) ||
		(headerValue(ex.Headers, "Content-Type") == "" && strings.HasPrefix(strings.TrimSpace(ex.Body), "{")) ||
		(headerValue(ex.Headers, "Content-Type") == "" && strings.HasPrefix(strings.TrimSpace(ex.Body), "["))
}

// httpCall is a validated http tool.
type httpCall struct {
	name     string
	ex       *HTTPExecution
	method   string
	timeout  time.Duration
	jsonBody bool
	client   *http.Client
}

// run fills the templates with args, calls the endpoint and returns
// {status, body[, truncated]}, or a *StatusError for a non-2xx answer.
func (t *httpCall) run(ctx context.Context, args map[string]any, _ Call) (any, error) {
	rawURL, err := substitute(t.ex.URL, args, escapeURL)
	if err != nil {
		return nil, invalidf(t.name, "%v", err)
	}
	if _, err := checkURL(t.name, rawURL); err != nil {
		return nil, err
	}
	body, err := t.body(args)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, t.timeout)
	defer cancel()
	req, err := t.request(ctx, rawURL, body, args)
	if err != nil {
		return nil, err
	}
	resp, err := t.client.Do(req)
	if err != nil {
		// Not the *url.Error itself: it quotes the URL with its templates
		// filled in, and the operator's URL may carry a key. The result
		// goes to the model and, mirrored, to the user's chat.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return nil, fmt.Errorf("%s: %s request failed: %w", t.name, t.method, err)
	}
	defer resp.Body.Close()
	return t.result(resp)
}

// body is the request body: none for GET, the args as JSON without a body
// template, else the template filled in.
func (t *httpCall) body(args map[string]any) ([]byte, error) {
	if t.method == http.MethodGet {
		return nil, nil
	}
	if t.ex.Body == "" {
		body, err := json.Marshal(args)
		if err != nil {
			return nil, invalidf(t.name, "%v", err)
		}
		return body, nil
	}
	esc := escapeText
	if t.jsonBody {
		esc = escapeJSON
	}
	s, err := substitute(t.ex.Body, args, esc)
	if err != nil {
		return nil, invalidf(t.name, "%v", err)
	}
	return []byte(s), nil
}

// request builds the request with the header templates filled in and a
// Content-Type for a body that has none.
func (t *httpCall) request(ctx context.Context, rawURL string, body []byte, args map[string]any) (*http.Request, error) {
	var rd io.Reader // a nil *bytes.Reader would not read as "no body"
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, t.method, rawURL, rd)
	if err != nil {
		return nil, invalidf(t.name, "%v", err)
	}
	for k, tmpl := range t.ex.Headers {
		v, err := substitute(tmpl, args, escapeText)
		if err != nil {
			return nil, invalidf(t.name, "%v", err)
		}
		if strings.ContainsAny(v, "\r\n\x00") {
			return nil, invalidf(t.name, "header %s: value must not contain line breaks", k)
		}
		req.Header.Set(k, v)
	}
	if body != nil && req.Header.Get("Content-Type") == "" {
		if t.jsonBody {
			req.Header.Set("Content-Type", "application/json")
		} else {
			req.Header.Set("Content-Type", "text/plain; charset=utf-8")
		}
	}
	return req, nil
}

// result reads the response (bounded) as the tool's result: the body is
// parsed when it is whole JSON, else kept as text.
func (t *httpCall) result(resp *http.Response) (any, error) {
	b, truncated, err := readLimited(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("%s: reading the response: %w", t.name, err)
	}
	var respBody any = text(b)
	if !truncated && isJSONType(resp.Header.Get("Content-Type")) {
		var v any
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.UseNumber()
		if dec.Decode(&v) == nil && !dec.More() {
			respBody = v
		}
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return nil, &StatusError{Tool: t.name, Status: resp.StatusCode, Body: respBody}
	}
	out := map[string]any{"status": resp.StatusCode, "body": respBody}
	if truncated {
		out["truncated"] = true
	}
	return out, nil
}

func headerValue(h map[string]string, name string) string {
	for k, v := range h {
		if strings.EqualFold(k, name) {
			return v
		}
	}
	return ""
}

func isJSONType(ct string) bool {
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil {
		return false
	}
	return mt == "application/json" || strings.HasSuffix(mt, "+json")
}

// substitute replaces every {{input.a.b}} in s with the escaped value of
// args.a.b; a missing field is an error.
func substitute(s string, args map[string]any, escape func(any) string) (string, error) {
	var firstErr error
	out := templateRE.ReplaceAllStringFunc(s, func(m string) string {
		path := templateRE.FindStringSubmatch(m)[1][1:]
		var cur any = args
		for _, k := range strings.Split(path, ".") {
			obj, ok := cur.(map[string]any)
			if !ok {
				cur = nil
				break
			}
			if cur, ok = obj[k]; !ok {
				cur = nil
				break
			}
		}
		if cur == nil {
			if firstErr == nil {
				firstErr = fmt.Errorf("missing field %q (used by the tool's {{input.%s}} template)", path, path)
			}
			return ""
		}
		return escape(cur)
	})
	return out, firstErr
}

// plain renders a value as text: strings as-is, other values as JSON.
func plain(v any) string {
	if s, ok := v.(string); ok {
		return s
	}
	b, _ := json.Marshal(v)
	return string(b)
}

func escapeText(v any) string { return plain(v) }

// escapeURL escapes for a URL path segment or query value alike (spaces as
// %20, & = / ? # escaped).
func escapeURL(v any) string {
	return strings.ReplaceAll(url.QueryEscape(plain(v)), "+", "%20")
}

// escapeJSON renders a string JSON-escaped without its quotes (the template
// supplies them: "{{input.city}}"), other values as JSON.
func escapeJSON(v any) string {
	b, _ := json.Marshal(v)
	if _, ok := v.(string); ok && len(b) >= 2 {
		return string(b[1 : len(b)-1])
	}
	return string(b)
}
