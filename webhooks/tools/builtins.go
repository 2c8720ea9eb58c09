package tools

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/loomdb/loom/collections"
)

// MaxQueryLimit caps query_documents' limit (also its default).
const MaxQueryLimit = 50

// Builtins returns the definitions of the built-in tools: current_time ({}),
// calculator ({"expression": string}), query_documents (a query object:
// collection, filters, orderBy, limit) and http_get ({"url": string}).
func Builtins() []Def {
	return []Def{
		{
			Name:          "current_time",
			Description:   "Get the current date and time (UTC, RFC 3339, and Unix seconds).",
			ExecutionType: ExecBuiltin,
			Visibility:    VisibilityVisible,
			InputSchema: map[string]any{
				"type":                 "object",
				"properties":           map[string]any{},
				"additionalProperties": false,
			},
		},
		{
			Name:          "calculator",
			Description:   `Evaluate an arithmetic expression: numbers, + - * / %, parentheses, unary minus. Example: {"expression": "(2+4)*7"}.`,
			ExecutionType: ExecBuiltin,
			Visibility:    VisibilityVisible,
			InputSchema: map[string]any{
				"type": "object",
				"properties": map[string]any{
					"expression": map[string]any{"type": "string", "minLength": 1, "maxLength": maxExprLen, "description": "the arithmetic expression, e.g. 6*7"},
				},
				"required":             []any{"expression"},
				"additionalProperties": false,
			},
		},
		{
			Name: "query_documents",
			Description: "Query the user's own documents. collection must be under users/<your user id>/ " +
				"(e.g. users/<uid>/notes); filters are {field, op, value} with op one of == != < <= > >= in not-in " +
				"array-contains array-contains-any prefix; orderBy is [{field, direction: asc|desc}]; limit at most 50.",
			ExecutionType: ExecBuiltin,
			Visibility:    VisibilityVisible,
			InputSchema: map[string]any{
				"type": "object",
				"properties": map[string]any{
					"collection": map[string]any{"type": "string", "minLength": 1, "description": "collection path, e.g. users/<uid>/notes"},
					"filters": map[string]any{
						"type": "array",
						"items": map[string]any{
							"type": "object",
							"properties": map[string]any{
								"field": map[string]any{"type": "string", "minLength": 1},
								"op": map[string]any{"type": "string", "enum": []any{
									"==", "!=", "<", "<=", ">", ">=", "in", "not-in",
									"array-contains", "contains", "array-contains-any", "prefix"}},
								"value": map[string]any{},
							},
							"required":             []any{"field", "op", "value"},
							"additionalProperties": false,
						},
					},
					"orderBy": map[string]any{
						"type": "array",
						"items": map[string]any{
							"type": "object",
							"properties": map[string]any{
								"field":     map[string]any{"type": "string", "minLength": 1},
								"direction": map[string]any{"type": "string", "enum": []any{"asc", "desc"}},
							},
							"required":             []any{"field"},
							"additionalProperties": false,
						},
					},
					"limit": map[string]any{"type": "integer", "minimum": 1, "description": "at most 50 (larger values are capped)"},
				},
				"required":             []any{"collection"},
				"additionalProperties": false,
			},
		},
		{
			Name:          "http_get",
			Description:   "Fetch a public http(s) URL with GET. Returns the status and the first 8 KiB of the body as text. Redirects are not followed.",
			ExecutionType: ExecBuiltin,
			Visibility:    VisibilityVisible,
			InputSchema: map[string]any{
				"type": "object",
				"properties": map[string]any{
					"url": map[string]any{"type": "string", "minLength": 1, "description": "absolute http or https URL"},
				},
				"required":             []any{"url"},
				"additionalProperties": false,
			},
		},
	}
}

func builtinImpls(deps Deps) map[string]runFunc {
	m := map[string]runFunc{
		"current_time": func(context.Context, map[string]any, Call) (any, error) {
			now := deps.Now().UTC()
			return map[string]any{"time": now.Format(time.RFC3339), "unix": now.Unix()}, nil
		},
		"calculator": func(_ context.Context, args map[string]any, _ Call) (any, error) {
			expr, _ := args["expression"].(string)
			v, err := Calculate(expr)
			if err != nil {
				return nil, invalidf("calculator", "%v", err)
			}
			return map[string]any{"result": numberResult(v)}, nil
		},
		"http_get": func(ctx context.Context, args map[string]any, _ Call) (any, error) {
			return httpGet(ctx, deps.Transport, args)
		},
	}
	if deps.Query != nil {
		m["query_documents"] = func(ctx context.Context, args map[string]any, call Call) (any, error) {
			return queryDocuments(ctx, deps.Query, args, call)
		}
	}
	return m
}

func queryDocuments(ctx context.Context, query QueryFunc, args map[string]any, call Call) (any, error) {
	uid := call.UserID
	if uid == "" || uid == "*" || !collections.ValidSegment(uid) {
		return nil, errors.New("query_documents: no valid user to run for")
	}
	coll, _ := args["collection"].(string)
	prefix := "users/" + uid + "/"
	if !strings.HasPrefix(coll, prefix) {
		return nil, invalidf("query_documents", "query_documents reads only your own documents (users/%s/...); %q is outside", uid, coll)
	}
	limitSet := args["limit"] != nil
	raw, err := json.Marshal(args)
	if err != nil {
		return nil, invalidf("query_documents", "%v", err)
	}
	q, err := collections.ParseQuery(raw)
	if err != nil {
		return nil, invalidf("query_documents", "%v", err)
	}
	if !limitSet || q.Limit > MaxQueryLimit {
		q.Limit = MaxQueryLimit
	}
	docs, err := query(ctx, q)
	if err != nil {
		return nil, queryFailure(err)
	}
	out := make([]map[string]any, 0, len(docs))
	for _, d := range docs {
		if d == nil {
			continue
		}
		m := make(map[string]any, len(d.Data)+2)
		for k, v := range d.Data {
			m[k] = v
		}
		m["id"] = d.ID
		m["path"] = d.Path
		out = append(out, m)
	}
	return map[string]any{"documents": out}, nil
}

// newClient returns a client over t that follows no redirects.
func newClient(t http.RoundTripper) *http.Client {
	return &http.Client{
		Transport: t,
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		},
	}
}

func checkURL(tool, raw string) (*url.URL, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, invalidf(tool, "url %q: %v", raw, err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, invalidf(tool, "url %q: must be an absolute http or https URL", raw)
	}
	return u, nil
}

func httpGet(ctx context.Context, t http.RoundTripper, args map[string]any) (any, error) {
	raw, _ := args["url"].(string)
	u, err := checkURL("http_get", raw)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, DefaultHTTPTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, invalidf("http_get", "%v", err)
	}
	resp, err := newClient(t).Do(req)
	if err != nil {
		return nil, fmt.Errorf("http_get: %w", err)
	}
	defer resp.Body.Close()
	body, truncated, err := readLimited(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("http_get: reading the response: %w", err)
	}
	out := map[string]any{"status": resp.StatusCode, "body": text(body)}
	if truncated {
		out["truncated"] = true
	}
	return out, nil
}

// readLimited reads up to MaxResponseBody bytes and reports whether there
// was more.
func readLimited(r io.Reader) ([]byte, bool, error) {
	b, err := io.ReadAll(io.LimitReader(r, MaxResponseBody+1))
	if err != nil {
		return nil, false, err
	}
	if len(b) > MaxResponseBody {
		return b[:MaxResponseBody], true, nil
	}
	return b, false, nil
}

// text returns b as valid UTF-8 text: an incomplete rune at the end (cut by
// truncation) is dropped, invalid bytes become U+FFFD.
func text(b []byte) string {
	for i := len(b) - 1; i >= 0 && i >= len(b)-utf8.UTFMax; i-- {
		if utf8.RuneStart(b[i]) {
			if !utf8.FullRune(b[i:]) {
				b = b[:i]
			}
			break
		}
	}
	return strings.ToValidUTF8(string(b), "\uFFFD")
}

// queryFailure is what a failed query_documents run says. Its text is
// recorded in the user's documents and shown to the model, so it quotes
// only what names the caller's own query (an invalid query or path); any
// other failure says only that the read failed — the store's words name
// its internals. The cause stays in the chain for errors.Is.
func queryFailure(err error) error {
	if errors.Is(err, collections.ErrInvalidQuery) || errors.Is(err, collections.ErrInvalidPath) {
		return fmt.Errorf("query_documents: %w", err)
	}
	return &quietError{msg: "query_documents: the documents could not be read", err: err}
}

// quietError shows msg and keeps err for errors.Is / errors.As.
type quietError struct {
	msg string
	err error
}

func (e *quietError) Error() string { return e.msg }
func (e *quietError) Unwrap() error { return e.err }
