// Package loomclient is a Go client for Loom's documents API: any Go
// program can import it to read, write and query documents of a running
// Loom server over HTTP. Loom's agent runtime uses it too: *Client
// implements webhooks.Docs.
//
// A Client is built from a base URL and a credential: the admin key, a
// service key (POST /admin/v1/keys) or a user's access token, sent as
// Authorization: Bearer <key>. The server authorizes each request as it
// would the same request from curl: by the security rules for that
// credential (the admin key may do everything). A Client works on one
// database (Config.Database, default "default") and is safe for
// concurrent use.
//
// The methods map onto the REST API (README, Documents and Queries):
//
//	Get     GET   /api/v1/databases/{db}/documents/{path}
//	Create  POST  /api/v1/databases/{db}/documents/{collection} with the
//	        explicit "id": the server's must-not-exist create (409
//	        ALREADY_EXISTS over a live document; PUT would overwrite)
//	Update  PATCH /api/v1/databases/{db}/documents/{path} {"doc": {...}},
//	        with If-Match: "<version>" when ifVersion > 0
//	Query   POST  /api/v1/databases/{db}/query, following nextCursor
//
// Documents come back as *collections.Document with numbers as
// json.Number, so 64-bit integers survive the round trip.
//
// Errors wrap collections.ErrNotFound, ErrAlreadyExists,
// ErrPreconditionFailed, ErrInvalidPath, ErrInvalidQuery, ErrInvalidDocument
// and ErrTooLarge (any 413), or this package's ErrUnauthorized / ErrForbidden,
// so callers test them with errors.Is; every non-2xx answer is an
// *HTTPError, and Retryable reports whether retrying may help (429, 5xx,
// 409 CONFLICT and transport failures).
package loomclient

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/loomdb/loom/collections"
)

// Sentinels for authentication and authorization failures.
var (
	// ErrUnauthorized: 401 UNAUTHENTICATED (missing, wrong or revoked key).
	ErrUnauthorized = errors.New("loomclient: unauthorized (401): the API key was rejected")
	// ErrForbidden: 403 PERMISSION_DENIED (the security rules deny the
	// operation to this key).
	ErrForbidden = errors.New("loomclient: forbidden (403): the security rules deny this operation")
	// ErrIncomplete: Query followed maxEmptyPages empty pages in a row (the
	// security rules hid everything the server examined) and stopped with
	// more to read; the documents found so far come with it.
	ErrIncomplete = errors.New("loomclient: query stopped after too many empty pages: the result may be incomplete")
)

// DefaultDatabase is the database used when Config.Database is empty.
const DefaultDatabase = "default"

// maxResponseBytes bounds a response body read into memory.
const maxResponseBytes = 64 << 20

// Config configures a Client.
type Config struct {
	BaseURL  string // e.g. http://127.0.0.1:8080
	APIKey   string // sent as Authorization: Bearer <key>
	Database string // default "default"
	// HTTPClient defaults to a client with a 30 s timeout and keep-alive
	// pooling (MaxIdleConnsPerHost 64).
	HTTPClient *http.Client
	// PageSize is the largest limit sent in one query request (default and
	// maximum collections.MaxLimit, the server's cap). Query follows
	// nextCursor until it has q.Limit documents.
	PageSize int
}

// Client is a Loom documents API client. It is safe for concurrent use.
type Client struct {
	base     string // scheme://host[/prefix], no trailing slash
	auth     string
	db       string
	hc       *http.Client
	pageSize int
}

// New returns a Client for cfg.
func New(cfg Config) (*Client, error) {
	u, err := url.Parse(strings.TrimSpace(cfg.BaseURL))
	if err != nil {
		return nil, fmt.Errorf("loomclient: base URL: %w", err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("loomclient: base URL %q must be http(s)://host[:port]", cfg.BaseURL)
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("loomclient: base URL %q must not have a query or fragment", cfg.BaseURL)
	}
	db := cfg.Database
	if db == "" {
		db = DefaultDatabase
	}
	if strings.ContainsAny(db, "/?#%") {
		return nil, fmt.Errorf("loomclient: invalid database name %q", db)
	}
	hc := cfg.HTTPClient
	if hc == nil {
		hc = defaultHTTPClient()
	}
	ps := cfg.PageSize
	if ps <= 0 || ps > collections.MaxLimit {
		ps = collections.MaxLimit
	}
	c := &Client{
		base:     strings.TrimRight(u.Scheme+"://"+u.Host+u.EscapedPath(), "/"),
		db:       db,
		hc:       hc,
		pageSize: ps,
	}
	if cfg.APIKey != "" {
		c.auth = "Bearer " + cfg.APIKey
	}
	return c, nil
}

func defaultHTTPClient() *http.Client {
	t := &http.Transport{
		Proxy: http.ProxyFromEnvironment,
		DialContext: (&net.Dialer{
			Timeout:   10 * time.Second,
			KeepAlive: 30 * time.Second,
		}).DialContext,
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          256,
		MaxIdleConnsPerHost:   64,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ExpectContinueTimeout: time.Second,
	}
	return &http.Client{Timeout: 30 * time.Second, Transport: t}
}

// HTTPError is a non-2xx answer of the server: the status and the error
// body's code and message. It unwraps to the matching sentinel
// (collections.ErrNotFound, ErrAlreadyExists, ErrPreconditionFailed,
// ErrUnauthorized, ErrForbidden) when there is one.
type HTTPError struct {
	Method  string
	Path    string // the document or collection path, or "query"
	Status  int
	Code    string // e.g. NOT_FOUND; empty if the body was not an error object
	Message string
	// RetryAfter is the Retry-After header of 429/503 answers (0 if none).
	RetryAfter time.Duration
	sentinel   error
}

func (e *HTTPError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "loomclient: %s %s: %d", e.Method, e.Path, e.Status)
	if e.Code != "" {
		b.WriteString(" " + e.Code)
	}
	if e.Message != "" {
		b.WriteString(": " + e.Message)
	}
	return b.String()
}

// Forbidden reports a 403: the security rules deny the operation (as
// access.Denied.Forbidden does in process).
func (e *HTTPError) Forbidden() bool { return e.Status == http.StatusForbidden }

// Unwrap returns the sentinel matching the status, if any.
func (e *HTTPError) Unwrap() error { return e.sentinel }

// Retryable reports whether the request may succeed if retried: 429, 5xx,
// and 409 CONFLICT (a concurrent write moved a cursor).
func (e *HTTPError) Retryable() bool {
	return e.Status == http.StatusTooManyRequests || e.Status >= 500 ||
		(e.Status == http.StatusConflict && e.Code == "CONFLICT")
}

// Retryable reports whether err is a transient failure: an *HTTPError that
// is Retryable, or a transport error (connection refused, reset, client
// timeout). Context cancellation by the caller is not retryable.
func Retryable(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) {
		return false
	}
	var he *HTTPError
	if errors.As(err, &he) {
		return he.Retryable()
	}
	var ue *url.Error
	return errors.As(err, &ue)
}

// Get returns the live document at path.
func (c *Client) Get(ctx context.Context, path string) (*collections.Document, error) {
	if err := collections.ValidateDocPath(path); err != nil {
		return nil, fmt.Errorf("loomclient: get %s: %w", path, err)
	}
	body, err := c.do(ctx, http.MethodGet, path, c.docURL(path), nil, nil)
	if err != nil {
		return nil, err
	}
	return decodeDoc(body)
}

// Create creates the document at path with data. It never overwrites: over
// a live document it fails with an error wrapping
// collections.ErrAlreadyExists. It POSTs to the collection with the explicit
// "id" (the server's create write; PUT would replace).
func (c *Client) Create(ctx context.Context, path string, data map[string]any) (*collections.Document, error) {
	if err := collections.ValidateDocPath(path); err != nil {
		return nil, fmt.Errorf("loomclient: create %s: %w", path, err)
	}
	col, id := collections.SplitDocPath(path)
	body := make(map[string]any, len(data)+1)
	for k, v := range data {
		if collections.IsEnvelopeField(k) {
			continue // server-owned; the server would drop or reject them
		}
		body[k] = v
	}
	body[collections.FieldID] = id
	b, err := json.Marshal(body)
	if err != nil {
		return nil, fmt.Errorf("loomclient: create %s: encode: %w", path, err)
	}
	resp, err := c.do(ctx, http.MethodPost, path, c.docURL(col), b, nil)
	if err != nil {
		return nil, err
	}
	return decodeDoc(resp)
}

// Update deep-merges data into the live document at path (PATCH: null
// removes a field, dotted keys nest). With ifVersion > 0 it applies only at
// that version (If-Match), else fails wrapping
// collections.ErrPreconditionFailed. A missing document is ErrNotFound.
func (c *Client) Update(ctx context.Context, path string, data map[string]any, ifVersion int64) (*collections.Document, error) {
	if err := collections.ValidateDocPath(path); err != nil {
		return nil, fmt.Errorf("loomclient: update %s: %w", path, err)
	}
	if data == nil {
		data = map[string]any{}
	}
	b, err := json.Marshal(map[string]any{"doc": data})
	if err != nil {
		return nil, fmt.Errorf("loomclient: update %s: encode: %w", path, err)
	}
	var h http.Header
	if ifVersion > 0 {
		h = http.Header{"If-Match": {`"` + strconv.FormatInt(ifVersion, 10) + `"`}}
	}
	resp, err := c.do(ctx, http.MethodPatch, path, c.docURL(path), b, h)
	if err != nil {
		return nil, err
	}
	return decodeDoc(resp)
}

// Delete removes the live document at path. A missing document is
// ErrNotFound.
func (c *Client) Delete(ctx context.Context, path string) error {
	if err := collections.ValidateDocPath(path); err != nil {
		return fmt.Errorf("loomclient: delete %s: %w", path, err)
	}
	_, err := c.do(ctx, http.MethodDelete, path, c.docURL(path), nil, nil)
	return err
}

// Batch commits writes atomically with POST /batch: all of them or, on an
// error, none. A create, update or delete means what Create, Update
// (IfMatch for a version) and Delete do. It returns the written documents
// in order (nil for a delete); the server bounds a batch to 500 writes.
func (c *Client) Batch(ctx context.Context, writes []collections.Write) ([]*collections.Document, error) {
	type wireWrite struct {
		Type    collections.WriteType `json:"type"`
		Path    string                `json:"path"`
		Data    map[string]any        `json:"data"` // null for a delete
		IfMatch []collections.Filter  `json:"ifMatch,omitempty"`
	}
	ws := make([]wireWrite, len(writes))
	for i, w := range writes {
		if err := collections.ValidateDocPath(w.Path); err != nil {
			return nil, fmt.Errorf("loomclient: batch: %w", &collections.WriteError{Index: i, Path: w.Path, Err: err})
		}
		ws[i] = wireWrite{Type: w.Type, Path: w.Path, IfMatch: w.IfMatch}
		switch w.Type {
		case collections.WriteCreate, collections.WriteUpdate:
			ws[i].Data = make(map[string]any, len(w.Data))
			for k, v := range w.Data {
				if w.Type == collections.WriteUpdate || !collections.IsEnvelopeField(k) {
					ws[i].Data[k] = v // a create drops server-owned fields, as Create does
				}
			}
		case collections.WriteDelete:
		default:
			return nil, fmt.Errorf("loomclient: batch: %w", &collections.WriteError{Index: i, Path: w.Path,
				Err: fmt.Errorf("%w: write type %q", collections.ErrInvalidDocument, w.Type)})
		}
	}
	b, err := json.Marshal(map[string]any{"writes": ws})
	if err != nil {
		return nil, fmt.Errorf("loomclient: batch: encode: %w", err)
	}
	resp, err := c.do(ctx, http.MethodPost, "batch", c.base+"/api/v1/databases/"+url.PathEscape(c.db)+"/batch", b, nil)
	if err != nil {
		return nil, err
	}
	var answer struct {
		Results []json.RawMessage `json:"results"`
	}
	if err := json.Unmarshal(resp, &answer); err != nil || len(answer.Results) != len(writes) {
		return nil, fmt.Errorf("loomclient: batch: unexpected answer (%d results for %d writes, %v)", len(answer.Results), len(writes), err)
	}
	out := make([]*collections.Document, len(writes))
	for i, r := range answer.Results {
		if writes[i].Type == collections.WriteDelete || string(r) == "null" {
			continue
		}
		if out[i], err = decodeDoc(r); err != nil {
			return nil, fmt.Errorf("loomclient: batch: %w", err)
		}
	}
	return out, nil
}

// maxEmptyPages bounds how many empty pages in a row Query follows before
// it returns what it has, with ErrIncomplete.
const maxEmptyPages = 32

// Query returns up to q.Limit documents (0 means collections.DefaultLimit)
// of the query, starting after q.StartAfter, following the server's
// nextCursor across pages. After maxEmptyPages empty pages in a row it
// returns the documents found so far and ErrIncomplete, never a short
// result that looks whole.
func (c *Client) Query(ctx context.Context, q collections.Query) ([]*collections.Document, error) {
	want := q.Limit
	if want < 0 {
		return nil, fmt.Errorf("loomclient: query: %w: limit must not be negative", collections.ErrInvalidQuery)
	}
	if want == 0 {
		want = collections.DefaultLimit
	}
	u := c.base + "/api/v1/databases/" + url.PathEscape(c.db) + "/query"
	var out []*collections.Document
	empty := 0 // pages in a row that held no document
	for len(out) < want {
		page := q
		page.Limit = min(want-len(out), c.pageSize)
		b, err := json.Marshal(page)
		if err != nil {
			return nil, fmt.Errorf("loomclient: query: encode: %w", err)
		}
		resp, h, err := c.doHeader(ctx, http.MethodPost, "query "+q.Collection, u, b, nil)
		if err != nil {
			return nil, err
		}
		docs, next, err := decodePage(resp, h)
		if err != nil {
			return nil, err
		}
		out = append(out, docs...)
		if next == "" {
			break
		}
		// Security rules can hide every document the server examined for a
		// page: a page can be empty and still have a next one. Follow it, but
		// not forever.
		if len(docs) > 0 {
			empty = 0
		} else if empty++; empty >= maxEmptyPages {
			return out, fmt.Errorf("%w (%s)", ErrIncomplete, q.Collection)
		}
		q.StartAfter = next
	}
	if len(out) > want {
		out = out[:want]
	}
	return out, nil
}

func (c *Client) docURL(path string) string {
	segs := strings.Split(path, "/")
	for i, s := range segs {
		segs[i] = url.PathEscape(s)
	}
	return c.base + "/api/v1/databases/" + url.PathEscape(c.db) + "/documents/" + strings.Join(segs, "/")
}

// do sends one request and returns the body of a 2xx answer, or an
// *HTTPError.
func (c *Client) do(ctx context.Context, method, what, u string, body []byte, h http.Header) ([]byte, error) {
	b, _, err := c.doHeader(ctx, method, what, u, body, h)
	return b, err
}

// doHeader is do that also returns the answer's headers.
func (c *Client) doHeader(ctx context.Context, method, what, u string, body []byte, h http.Header) ([]byte, http.Header, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return nil, nil, fmt.Errorf("loomclient: %s %s: %w", method, what, err)
	}
	for k, v := range h {
		req.Header[k] = v
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	if c.auth != "" {
		req.Header.Set("Authorization", c.auth)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		if ctxErr := ctx.Err(); ctxErr != nil && !errors.Is(err, ctxErr) {
			return nil, nil, fmt.Errorf("loomclient: %s %s: %w (%v)", method, what, ctxErr, err)
		}
		return nil, nil, fmt.Errorf("loomclient: %s %s: %w", method, what, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxResponseBytes+1))
	if err != nil {
		return nil, nil, fmt.Errorf("loomclient: %s %s: read response: %w", method, what, err)
	}
	if len(b) > maxResponseBytes {
		return nil, nil, fmt.Errorf("loomclient: %s %s: response larger than %d bytes", method, what, maxResponseBytes)
	}
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		return b, resp.Header, nil
	}
	return nil, nil, newHTTPError(method, what, resp, b)
}

func newHTTPError(method, what string, resp *http.Response, body []byte) *HTTPError {
	e := &HTTPError{Method: method, Path: what, Status: resp.StatusCode}
	var eb struct {
		Code    string `json:"code"`
		Message string `json:"message"`
		Details struct {
			Code string `json:"code"`
		} `json:"details"`
	}
	if json.Unmarshal(body, &eb) == nil && eb.Code != "" {
		e.Code, e.Message = eb.Code, eb.Message
		// A server with [compat] syntrix sends Syntrix's code names and
		// Loom's own code in details.code: go by Loom's.
		if eb.Details.Code != "" {
			e.Code = eb.Details.Code
		}
	} else {
		msg := strings.TrimSpace(string(body))
		if len(msg) > 200 {
			msg = msg[:200] + "…"
		}
		e.Message = msg
	}
	if ra := resp.Header.Get("Retry-After"); ra != "" {
		if n, err := strconv.Atoi(ra); err == nil && n >= 0 {
			e.RetryAfter = time.Duration(n) * time.Second
		}
	}
	switch {
	case resp.StatusCode == http.StatusNotFound && (e.Code == "NOT_FOUND" || e.Code == ""):
		e.sentinel = collections.ErrNotFound
	case resp.StatusCode == http.StatusConflict && e.Code == "ALREADY_EXISTS":
		e.sentinel = collections.ErrAlreadyExists
	case resp.StatusCode == http.StatusPreconditionFailed:
		e.sentinel = collections.ErrPreconditionFailed
	case resp.StatusCode == http.StatusUnauthorized:
		e.sentinel = ErrUnauthorized
	case resp.StatusCode == http.StatusForbidden:
		e.sentinel = ErrForbidden
	case resp.StatusCode == http.StatusBadRequest:
		switch e.Code {
		case "INVALID_PATH":
			e.sentinel = collections.ErrInvalidPath
		case "INVALID_QUERY":
			e.sentinel = collections.ErrInvalidQuery
		case "BAD_REQUEST", "INVALID_JSON":
			e.sentinel = collections.ErrInvalidDocument
		}
	case resp.StatusCode == http.StatusRequestEntityTooLarge:
		// DOCUMENT_TOO_LARGE or REQUEST_TOO_LARGE: either way this write is
		// too big to ever succeed.
		e.sentinel = collections.ErrTooLarge
	}
	return e
}

// decodeDoc decodes one flat wire envelope.
func decodeDoc(b []byte) (*collections.Document, error) {
	m, err := collections.DecodeObject(b)
	if err != nil {
		return nil, fmt.Errorf("loomclient: decode document: %w", err)
	}
	return envelope(m)
}

// decodePage decodes a query answer: {"docs", "nextCursor"}, or, from a
// server with [compat] syntrix, a bare array with the next cursor in the
// X-Next-Cursor header.
func decodePage(b []byte, h http.Header) ([]*collections.Document, string, error) {
	var raw []any
	var next string
	if t := bytes.TrimLeft(b, " \t\r\n"); len(t) > 0 && t[0] == '[' {
		v, err := collections.DecodeJSON(b)
		if err != nil {
			return nil, "", fmt.Errorf("loomclient: decode query page: %w", err)
		}
		raw, _ = v.([]any)
		next = h.Get("X-Next-Cursor")
	} else {
		m, err := collections.DecodeObject(b)
		if err != nil {
			return nil, "", fmt.Errorf("loomclient: decode query page: %w", err)
		}
		var ok bool
		raw, ok = m["docs"].([]any)
		if !ok && m["docs"] != nil {
			return nil, "", errors.New("loomclient: decode query page: \"docs\" is not an array")
		}
		next, _ = m["nextCursor"].(string)
	}
	docs := make([]*collections.Document, 0, len(raw))
	for i, x := range raw {
		dm, ok := x.(map[string]any)
		if !ok {
			return nil, "", fmt.Errorf("loomclient: decode query page: docs[%d] is not an object", i)
		}
		d, err := envelope(dm)
		if err != nil {
			return nil, "", err
		}
		docs = append(docs, d)
	}
	return docs, next, nil
}

// envelope splits a decoded wire document into the envelope and the user
// fields (m is consumed).
func envelope(m map[string]any) (*collections.Document, error) {
	d := &collections.Document{}
	var ok bool
	if d.ID, ok = m[collections.FieldID].(string); !ok || d.ID == "" {
		return nil, errors.New("loomclient: decode document: missing \"id\"")
	}
	if d.Collection, ok = m[collections.FieldCollection].(string); !ok || d.Collection == "" {
		return nil, errors.New("loomclient: decode document: missing \"collection\"")
	}
	d.Path = d.Collection + "/" + d.ID
	var err error
	if d.Version, err = intField(m, collections.FieldVersion); err != nil {
		return nil, err
	}
	if d.CreatedAt, err = intField(m, collections.FieldCreatedAt); err != nil {
		return nil, err
	}
	if d.UpdatedAt, err = intField(m, collections.FieldUpdatedAt); err != nil {
		return nil, err
	}
	d.Deleted, _ = m[collections.FieldDeleted].(bool)
	for _, f := range [...]string{collections.FieldID, collections.FieldCollection, collections.FieldVersion,
		collections.FieldCreatedAt, collections.FieldUpdatedAt, collections.FieldDeleted} {
		delete(m, f)
	}
	d.Data = m
	return d, nil
}

func intField(m map[string]any, k string) (int64, error) {
	n, ok := m[k].(json.Number)
	if !ok {
		return 0, fmt.Errorf("loomclient: decode document: %q is not a number", k)
	}
	v, err := n.Int64()
	if err != nil {
		return 0, fmt.Errorf("loomclient: decode document: %q: %w", k, err)
	}
	return v, nil
}
