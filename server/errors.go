package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/loomdb/loom/access"
	"github.com/loomdb/loom/collections"
	"github.com/loomdb/loom/internal/auth"
	"github.com/loomdb/loom/triggers"
)

// Error codes of the wire format (README, Errors).
const (
	codeBadRequest         = "BAD_REQUEST"
	codeInvalidPath        = "INVALID_PATH"
	codeInvalidQuery       = "INVALID_QUERY"
	codeInvalidJSON        = "INVALID_JSON"
	codeUnauthenticated    = "UNAUTHENTICATED"
	codePermissionDenied   = "PERMISSION_DENIED"
	codeNotFound           = "NOT_FOUND"
	codeMethodNotAllowed   = "METHOD_NOT_ALLOWED"
	codeAlreadyExists      = "ALREADY_EXISTS"
	codeConflict           = "CONFLICT"
	codePreconditionFailed = "PRECONDITION_FAILED"
	codeDocumentTooLarge   = "DOCUMENT_TOO_LARGE"
	codeRequestTooLarge    = "REQUEST_TOO_LARGE"
	codeUnavailable        = "UNAVAILABLE"
	codeInternal           = "INTERNAL"
	codeRateLimited        = "RATE_LIMITED"
)

// apiError is an error response: status plus the JSON body
// {"code","message","details"?}. Handlers return it for errors they detect
// themselves; store errors are translated by toAPIError.
type apiError struct {
	Status  int
	Code    string
	Message string
	// Details are encoded as the "details" object; values are JSON-encodable
	// (a *collections.Document encodes as its wire envelope).
	Details map[string]any
	// cause is logged for 500s, never sent.
	cause error
	// retryAfter is sent as Retry-After on 429s.
	retryAfter time.Duration
	// fieldErr is the one entry of the "errors" list of the Syntrix
	// format, [{"field","message"}]: set by wire under [compat] syntrix
	// only. A pointer, so that apiError keeps its 80-byte size class
	// (every error response allocates one).
	fieldErr *fieldError
}

// fieldError is one entry of a Syntrix error body's "errors" (its SDK's
// ValidationError).
type fieldError struct {
	Field   string `json:"field"`
	Message string `json:"message"`
}

func (e *apiError) Error() string { return e.Code + ": " + e.Message }

func errorf(status int, code, format string, args ...any) *apiError {
	return &apiError{Status: status, Code: code, Message: fmt.Sprintf(format, args...)}
}

// withDetail returns e with one more detail (e is modified).
func (e *apiError) withDetail(k string, v any) *apiError {
	if e.Details == nil {
		e.Details = make(map[string]any, 2)
	}
	e.Details[k] = v
	return e
}

// toAPIError is the one place where an error becomes an HTTP status and code.
// Sentinels and typed errors from collections are matched with errors.Is/As;
// anything unknown is a 500 with a generic message (the raw error goes only to
// the log, via apiError.cause).
func toAPIError(err error) *apiError {
	var ae *apiError
	if errors.As(err, &ae) {
		// Our own errors, possibly wrapped in a *WriteError by batch
		// parsing: keep the index.
		out := *ae
		if we := (*collections.WriteError)(nil); errors.As(err, &we) {
			out.Details = cloneDetails(ae.Details)
			out.withDetail("index", we.Index)
		}
		return &out
	}

	out := classify(err)
	var we *collections.WriteError
	if errors.As(err, &we) && out.Status != http.StatusInternalServerError {
		out.withDetail("index", we.Index)
	}
	return out
}

func classify(err error) *apiError {
	var (
		pe  *collections.PreconditionError
		hpe *access.HiddenPrecondition
		de  *access.Denied
		iw  *access.InvalidWrite
		mbe *http.MaxBytesError
		rle *auth.RateLimitError
	)
	switch {
	case errors.As(err, &de):
		// Anonymous callers may gain access by authenticating.
		if de.Anonymous {
			return errorf(http.StatusUnauthorized, codeUnauthenticated, "Unauthorized: authentication required to %s.", de.What)
		}
		return errorf(http.StatusForbidden, codePermissionDenied, "Security rules do not allow you to %s.", de.What)
	case errors.As(err, &iw):
		// The check names the user's own input and the bound it broke.
		e := errorf(http.StatusBadRequest, codeBadRequest, "Invalid document %s: %s.", iw.Path, strings.TrimSuffix(invalidWriteMsg(iw), "."))
		if iw.Field != "" {
			e.withDetail("field", iw.Field)
		}
		return e
	case errors.Is(err, access.ErrSystemWrite):
		return errorf(http.StatusForbidden, codePermissionDenied, "System collections cannot be written through the document API.")
	case errors.Is(err, access.ErrBadCursor):
		return errorf(http.StatusBadRequest, codeInvalidQuery, "startAfter is not a cursor this server returned for this query.")
	case errors.As(err, &hpe):
		// No details.current: the caller may not read the document.
		return errorf(http.StatusPreconditionFailed, codePreconditionFailed, "The precondition (ifMatch / If-Match) does not hold for %s.", hpe.Path)
	case errors.As(err, &pe):
		e := errorf(http.StatusPreconditionFailed, codePreconditionFailed, "The precondition (ifMatch / If-Match) does not hold for %s.", pe.Path)
		if pe.Current != nil {
			return e.withDetail("current", pe.Current)
		}
		return e.withDetail("current", nil)
	case errors.Is(err, auth.ErrUserExists):
		return errorf(http.StatusConflict, codeAlreadyExists, "That username is taken.")
	case errors.Is(err, auth.ErrInvalidUsername):
		return errorf(http.StatusBadRequest, codeBadRequest, "The username must be 3 to 64 characters of letters, digits and _ . @ -.")
	case errors.Is(err, auth.ErrWeakPassword):
		min, max := auth.DefaultMinPasswordLength, auth.MaxPasswordBytes
		if wpe := (*auth.WeakPasswordError)(nil); errors.As(err, &wpe) {
			min, max = wpe.Min, wpe.Max
		}
		return errorf(http.StatusBadRequest, codeBadRequest, "The password must be at least %d characters (and at most %d bytes).", min, max)
	case errors.Is(err, auth.ErrInvalidCredentials):
		return errorf(http.StatusUnauthorized, codeUnauthenticated, "Unauthorized: invalid username or password.")
	case errors.Is(err, auth.ErrServiceKeyExists):
		return errorf(http.StatusConflict, codeAlreadyExists, "A service key with that name exists.")
	case errors.Is(err, auth.ErrInvalidServiceKey):
		return errorf(http.StatusBadRequest, codeBadRequest, "%s.", strings.TrimPrefix(err.Error(), "auth: "))
	case errors.Is(err, auth.ErrInvalidRoles):
		return errorf(http.StatusBadRequest, codeBadRequest, "%s.", strings.TrimPrefix(err.Error(), "auth: "))
	case errors.Is(err, auth.ErrConcurrentChange):
		return errorf(http.StatusConflict, codeConflict, "The user changed while its roles were written; retry.")
	case errors.Is(err, auth.ErrInvalidToken):
		return errorf(http.StatusUnauthorized, codeUnauthenticated, "Unauthorized: the token is not valid or has expired.")
	case errors.As(err, &rle):
		e := errorf(http.StatusTooManyRequests, codeRateLimited, "Too many attempts; retry later.")
		e.retryAfter = rle.RetryAfter
		return e
	case errors.Is(err, auth.ErrBusy):
		return errorf(http.StatusServiceUnavailable, codeUnavailable, "The server is busy checking passwords; retry shortly.")
	case errors.Is(err, triggers.ErrNotFound):
		return errorf(http.StatusNotFound, codeNotFound, "%s.", sentence(err, triggers.ErrNotFound))
	case errors.Is(err, triggers.ErrConflict):
		return errorf(http.StatusConflict, codeConflict, "%s.", sentence(err, triggers.ErrConflict))
	case errors.Is(err, triggers.ErrInvalid):
		return errorf(http.StatusBadRequest, codeBadRequest, "%s.", sentence(err, triggers.ErrInvalid))
	case errors.Is(err, collections.ErrNotFound):
		return errorf(http.StatusNotFound, codeNotFound, "Document not found.")
	case errors.Is(err, collections.ErrAlreadyExists):
		return errorf(http.StatusConflict, codeAlreadyExists, "A document already exists at this path.")
	case errors.Is(err, collections.ErrTooLarge):
		return errorf(http.StatusRequestEntityTooLarge, codeDocumentTooLarge, "The document is larger than the configured limit.")
	case errors.As(err, &mbe):
		return errorf(http.StatusRequestEntityTooLarge, codeRequestTooLarge, "The request body is larger than %d bytes.", mbe.Limit)
	case errors.Is(err, collections.ErrInvalidPath):
		return errorf(http.StatusBadRequest, codeInvalidPath, "%s.", sentence(err, collections.ErrInvalidPath))
	case errors.Is(err, collections.ErrInvalidQuery):
		return errorf(http.StatusBadRequest, codeInvalidQuery, "%s.", sentence(err, collections.ErrInvalidQuery))
	case errors.Is(err, collections.ErrInvalidDocument):
		return errorf(http.StatusBadRequest, codeBadRequest, "%s.", sentence(err, collections.ErrInvalidDocument))
	case errors.Is(err, collections.ErrCursorConflict):
		return errorf(http.StatusConflict, codeConflict, "A concurrent write moved the cursor; retry.")
	case errors.Is(err, collections.ErrClosed):
		return errorf(http.StatusServiceUnavailable, codeUnavailable, "The database is shutting down.")
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return errorf(http.StatusServiceUnavailable, codeUnavailable, "The request was cancelled or timed out.")
	}
	e := errorf(http.StatusInternalServerError, codeInternal, "Internal server error.")
	e.cause = err
	return e
}

func invalidWriteMsg(iw *access.InvalidWrite) string {
	if iw.Field != "" {
		return iw.Field + ": " + iw.Msg
	}
	return iw.Msg
}

// sentence turns a validation error from collections into a message for the
// client: the text from the sentinel on ("invalid path: empty segment in
// ..."). That part describes the client's own input; whatever an engine or a
// *WriteError put in front of it (engine name, operation) is cut off.
func sentence(err, sentinel error) string {
	msg := err.Error()
	if i := strings.Index(msg, sentinel.Error()); i > 0 {
		msg = msg[i:]
	}
	msg = strings.TrimSuffix(msg, ".")
	if msg == "" {
		return "Invalid request"
	}
	return strings.ToUpper(msg[:1]) + msg[1:]
}

func cloneDetails(d map[string]any) map[string]any {
	out := make(map[string]any, len(d)+1)
	for k, v := range d {
		out[k] = v
	}
	return out
}

// Syntrix's names for Loom's error codes ([compat] syntrix): the codes its
// server sends (internal/gateway/rest/handler.go) and its TS SDK tests
// (sdk/syntrix-client-ts/src/api/errors.ts, ErrorCodes). Codes not listed
// keep their name: NOT_FOUND, CONFLICT, PRECONDITION_FAILED,
// REQUEST_TOO_LARGE, RATE_LIMITED and BAD_REQUEST are the same in both;
// UNAVAILABLE, METHOD_NOT_ALLOWED, SLOW_CONSUMER and the like have no
// Syntrix equivalent.
var syntrixCodes = map[string]string{
	codeUnauthenticated:  "UNAUTHORIZED",
	codePermissionDenied: "FORBIDDEN",
	codeAlreadyExists:    codeConflict,
	codeInvalidPath:      codeBadRequest,
	codeInvalidQuery:     codeBadRequest,
	codeInvalidJSON:      codeBadRequest,
	codeDocumentTooLarge: codeRequestTooLarge,
	codeInternal:         "INTERNAL_ERROR",
}

// wire is the one place where an error takes the form this server sends,
// REST bodies and realtime error payloads alike. Without [compat] syntrix
// it is ae unchanged. With it, a code Syntrix names differently is renamed
// and Loom's own, finer code moves to details.code; an invalid document
// field is also listed as "errors": [{"field","message"}], which Syntrix's
// SDK reads for its validation errors (its message is what is wrong with
// the field, from err, which ae was made of). ae is never modified. The
// status never changes. RxDB replication keeps Loom's codes (see
// writeError): its clients key on the status and on "error": true.
func (s *Server) wire(ae *apiError, err error) *apiError {
	if !s.syntrix {
		return ae
	}
	out := *ae
	if name, ok := syntrixCodes[ae.Code]; ok {
		out.Details = cloneDetails(ae.Details)
		out.Details["code"] = ae.Code
		out.Code = name
	}
	if f, ok := ae.Details["field"].(string); ok && f != "" && out.Code == codeBadRequest {
		msg := ae.Message
		if iw := (*access.InvalidWrite)(nil); errors.As(err, &iw) && iw.Field == f && iw.Msg != "" {
			msg = iw.Msg
		}
		out.fieldErr = &fieldError{Field: f, Message: msg}
	}
	return &out
}

// writeError sends err as the JSON error body and aborts the gin chain.
func (s *Server) writeError(c *gin.Context, err error) {
	ae := toAPIError(err)
	// The RxDB replication routes (routeRxDB) keep Loom's codes under
	// [compat] syntrix: their group's first middleware, rxdbErrorFlag,
	// installs the rxdbErrorWriter, so the writer tells them apart.
	if _, rxdb := c.Writer.(*rxdbErrorWriter); !rxdb {
		ae = s.wire(ae, err)
	}
	if ae.Status >= 500 {
		s.log.ErrorContext(c.Request.Context(), "request failed",
			"method", c.Request.Method, "path", c.Request.URL.Path,
			"request_id", c.Writer.Header().Get(headerRequestID),
			"status", ae.Status, "err", errString(ae.cause, err))
	}
	switch ae.Status {
	case http.StatusUnauthorized:
		c.Header("WWW-Authenticate", `Bearer realm="loom"`)
	case http.StatusServiceUnavailable:
		c.Header("Retry-After", "1")
	case http.StatusTooManyRequests:
		if ae.retryAfter > 0 {
			c.Header("Retry-After", strconv.Itoa(max(1, int(math.Ceil(ae.retryAfter.Seconds())))))
		}
	}
	buf := getBuf()
	defer putBuf(buf)
	encodeError(buf, ae)
	c.Abort()
	sendJSON(c, ae.Status, buf.Bytes())
}

func errString(cause, err error) string {
	if cause != nil {
		return cause.Error()
	}
	return err.Error()
}

func encodeError(buf *bytes.Buffer, ae *apiError) {
	buf.WriteString(`{"code":`)
	writeString(buf, ae.Code)
	buf.WriteString(`,"message":`)
	writeString(buf, ae.Message)
	if len(ae.Details) > 0 {
		buf.WriteString(`,"details":{`)
		first := true
		for _, k := range slices.Sorted(maps.Keys(ae.Details)) {
			if !first {
				buf.WriteByte(',')
			}
			first = false
			writeString(buf, k)
			buf.WriteByte(':')
			encodeDetail(buf, ae.Details[k])
		}
		buf.WriteByte('}')
	}
	if ae.fieldErr != nil {
		buf.WriteString(`,"errors":`)
		encodeDetail(buf, []fieldError{*ae.fieldErr})
	}
	buf.WriteByte('}')
}

func encodeDetail(buf *bytes.Buffer, v any) {
	switch t := v.(type) {
	case nil:
		buf.WriteString("null")
	case *collections.Document:
		if t == nil {
			buf.WriteString("null")
			return
		}
		mark := buf.Len()
		if err := t.AppendJSON(buf); err != nil {
			buf.Truncate(mark)
			buf.WriteString("null")
		}
	case int:
		buf.WriteString(strconv.Itoa(t))
	case string:
		writeString(buf, t)
	default:
		b, err := json.Marshal(v)
		if err != nil {
			buf.WriteString("null")
			return
		}
		buf.Write(b)
	}
}
