package tools

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
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
	if err := checkTemplate("execution.url", ex.URL); err != nil {
		return nil, err
	}
	u, err := url.Parse(templateRE.ReplaceAllString(ex.URL, "x"))
	if err != nil {
		return nil, fmt.Errorf("execution.url: %v", err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("execution.url %q: must be an absolute http or https URL", ex.URL)
	}
	method := strings.ToUpper(ex.Method)
	switch method {
	case "":
		method = http.MethodGet
	case http.MethodGet, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete:
	default:
		return nil, fmt.Errorf("execution.method %q: use GET, POST, PUT, PATCH or DELETE", ex.Method)
	}
	if method == http.MethodGet && ex.Body != "" {
		return nil, errors.New("execution.body is not allowed with GET")
	}
	if err := checkTemplate("execution.body", ex.Body); err != nil {
		return nil, err
	}
	for k, v := range ex.Headers {
		if !headerNameRE.MatchString(k) {
			return nil, fmt.Errorf("execution.headers: invalid header name %q", k)
		}
		if strings.ContainsAny(v, "\r\n") {
			return nil, fmt.Errorf("execution.headers[%s]: value must be one line", k)
		}
		if err := checkTemplate("execution.headers["+k+"]", v); err != nil {
			return nil, err
		}
	}
	timeout := DefaultHTTPTimeout
	switch {
	case ex.Timeout < 0 || ex.Timeout > MaxHTTPTimeoutMillis:
		return nil, fmt.Errorf("execution.timeout %d: must be between 1 and %d milliseconds (0: default %d)", ex.Timeout, MaxHTTPTimeoutMillis, DefaultHTTPTimeout.Milliseconds())
	case ex.Timeout > 0:
		timeout = time.Duration(ex.Timeout) * time.Millisecond
	}
	jsonBody := ex.Body == "" || isJSONType(headerValue(ex.Headers, "Content-Type")) ||
		(headerValue(ex.Headers, "Content-Type") == "" && strings.HasPrefix(strings.TrimSpace(ex.Body), "{")) ||
		(headerValue(ex.Headers, "Content-Type") == "" && strings.HasPrefix(strings.TrimSpace(ex.Body), "["))
	client := newClient(transport)
	name := d.Name
	return func(ctx context.Context, args map[string]any, _ Call) (any, error) {
		rawURL, err := substitute(ex.URL, args, escapeURL)
		if err != nil {
			return nil, invalidf(name, "%v", err)
		}
		if _, err := checkURL(name, rawURL); err != nil {
			return nil, err
		}
		var body []byte
		if method != http.MethodGet {
			if ex.Body == "" {
				if body, err = json.Marshal(args); err != nil {
					return nil, invalidf(name, "%v", err)
				}
			} else {
				esc := escapeText
				if jsonBody {
					esc = escapeJSON
				}
				s, err := substitute(ex.Body, args, esc)
				if err != nil {
					return nil, invalidf(name, "%v", err)
				}
				body = []byte(s)
			}
		}
		ctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		var rd *bytes.Reader
		if body != nil {
			rd = bytes.NewReader(body)
		}
		var req *http.Request
		if rd != nil {
			req, err = http.NewRequestWithContext(ctx, method, rawURL, rd)
		} else {
			req, err = http.NewRequestWithContext(ctx, method, rawURL, nil)
		}
		if err != nil {
			return nil, invalidf(name, "%v", err)
		}
		for k, tmpl := range ex.Headers {
			v, err := substitute(tmpl, args, escapeText)
			if err != nil {
				return nil, invalidf(name, "%v", err)
			}
			if strings.ContainsAny(v, "\r\n\x00") {
				return nil, invalidf(name, "header %s: value must not contain line breaks", k)
			}
			req.Header.Set(k, v)
		}
		if body != nil && req.Header.Get("Content-Type") == "" {
			if jsonBody {
				req.Header.Set("Content-Type", "application/json")
			} else {
				req.Header.Set("Content-Type", "text/plain; charset=utf-8")
			}
		}
		resp, err := client.Do(req)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		defer resp.Body.Close()
		b, truncated, err := readLimited(resp.Body)
		if err != nil {
			return nil, fmt.Errorf("%s: reading the response: %w", name, err)
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
			return nil, &StatusError{Tool: name, Status: resp.StatusCode, Body: respBody}
		}
		out := map[string]any{"status": resp.StatusCode, "body": respBody}
		if truncated {
			out["truncated"] = true
		}
		return out, nil
	}, nil
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
