package triggers

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"net/url"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/google/cel-go/cel"

	"github.com/loomdb/loom/collections"
	"github.com/loomdb/loom/internal/pathpattern"
)

// Definition defaults and limits.
const (
	DefaultDatabase    = "default"
	DefaultTimeout     = 30 * time.Second
	MinTimeout         = time.Second
	MaxTimeout         = 5 * time.Minute
	DefaultMaxAttempts = 8
	MaxMaxAttempts     = 100
	// DefaultInitialBackoff and DefaultMaxBackoff bound the exponential
	// schedule of a retryPolicy that leaves them out.
	DefaultInitialBackoff = 5 * time.Second
	DefaultMaxBackoff     = 10 * time.Hour

	maxIDLen       = 64
	minSecretBytes = 24
	maxSecretBytes = 64
	// jitter is the ± fraction applied to every backoff.
	jitter = 0.2
)

// defaultSchedule is the delay before attempt n+1 after attempt n failed,
// without a retryPolicy: attempts at 0, +5s, +5m, +30m, +2h, +5h, +10h, +10h.
var defaultSchedule = [...]time.Duration{
	5 * time.Second, 5 * time.Minute, 30 * time.Minute, 2 * time.Hour,
	5 * time.Hour, 10 * time.Hour, 10 * time.Hour,
}

// Trigger is one trigger definition as written in triggers.json or
// registered via the admin API.
type Trigger struct {
	ID          string            `json:"triggerId"`
	Database    string            `json:"database,omitempty"`  // default "default"
	Collection  string            `json:"collection"`          // collection pattern: literal, *, {name}, final ** or {name=**}
	Events      []string          `json:"events"`              // non-empty subset of create|update|delete
	Condition   string            `json:"condition,omitempty"` // CEL, bool; empty = true
	URL         string            `json:"url"`                 // http(s); ${VAR} expanded
	Headers     map[string]string `json:"headers,omitempty"`   // values ${VAR} expanded
	Secret      string            `json:"secret,omitempty"`    // whsec_<base64 of 24..64 bytes>; ${VAR} expanded
	Timeout     string            `json:"timeout,omitempty"`   // Go duration, default 30s, 1s..5m
	RetryPolicy *RetryPolicy      `json:"retryPolicy,omitempty"`
	OrderingKey string            `json:"orderingKey,omitempty"` // CEL string expression
	// DeliverAt (CEL: a timestamp, unix ms or an RFC 3339 string) schedules
	// the delivery: its first attempt is made then (see MaxDeliverAhead).
	DeliverAt string `json:"deliverAt,omitempty"`
	Enabled   *bool  `json:"enabled,omitempty"` // default true
	// Format is the webhook body: "" or "loom" (the default, Loom's event
	// body) or "syntrix" (the body Syntrix's TriggerHandler reads, with a
	// preIssuedToken; see syntrixformat.go).
	Format string `json:"format,omitempty"`
	// TokenScope (format "syntrix" only) are the path patterns the
	// preIssuedToken may touch, captures bound from the event's params;
	// default: the event's collection and everything below it.
	TokenScope []string `json:"tokenScope,omitempty"`
}

// RetryPolicy replaces the default retry schedule with exponential backoff.
type RetryPolicy struct {
	MaxAttempts    int    `json:"maxAttempts,omitempty"`    // default 8, 1..100
	InitialBackoff string `json:"initialBackoff,omitempty"` // default 5s
	MaxBackoff     string `json:"maxBackoff,omitempty"`     // default 10h
}

// Compiled is a validated, ready-to-evaluate trigger. Def holds the
// definition with ${VAR} expanded and defaults filled in (Database,
// Enabled). It is immutable and safe for concurrent use.
type Compiled struct {
	Def     Trigger
	Timeout time.Duration

	pat  *pathpattern.Pattern
	ops  opMask
	cond cel.Program // nil: always true
	key  cel.Program // nil: no ordering key
	at   cel.Program // nil: delivered at once
	// scope is the compiled tokenScope (nil: the default scope).
	scope    []*pathpattern.Pattern
	attempts int
	// exponential is false for the default schedule.
	exponential          bool
	initBackoff, maxBack time.Duration
}

type opMask uint8

const (
	opCreate opMask = 1 << iota
	opUpdate
	opDelete
)

func maskOf(op collections.ChangeOp) opMask {
	switch op {
	case collections.OpCreate:
		return opCreate
	case collections.OpUpdate:
		return opUpdate
	case collections.OpDelete:
		return opDelete
	}
	return 0
}

// Expander resolves ${VAR} in url, headers and secret (only there). It
// returns an error for an unset variable.
type Expander func(name string) (string, error)

// Compile validates def, expands ${VAR} in its url, header values and
// secret with expand (nil: any ${VAR} is an error), fills in the defaults
// and compiles the pattern and the CEL expressions. Errors name the trigger
// and the field.
func Compile(def Trigger, expand Expander) (*Compiled, error) {
	c, err := compile(def, expand)
	if err != nil {
		name := fmt.Sprintf("%q", def.ID)
		if !validID(def.ID) {
			name = "with invalid triggerId " + name
		}
		return nil, fmt.Errorf("trigger %s: %w", name, err)
	}
	return c, nil
}

// compile checks the fields in the order they are documented, so the
// first error names the first bad field.
func compile(def Trigger, expand Expander) (*Compiled, error) {
	if !validID(def.ID) {
		return nil, fmt.Errorf("triggerId: %q must be 1 to %d characters of [A-Za-z0-9_-]", def.ID, maxIDLen)
	}
	def = ownCopy(def)
	c := &Compiled{Timeout: DefaultTimeout, attempts: DefaultMaxAttempts}
	if err := c.compileMatch(&def); err != nil {
		return nil, err
	}
	if err := c.compileCEL(&def); err != nil {
		return nil, err
	}
	if err := c.compileFormat(&def); err != nil {
		return nil, err
	}
	if err := expandTarget(&def, expand); err != nil {
		return nil, err
	}
	if err := c.compileSchedule(&def); err != nil {
		return nil, err
	}
	c.Def = def
	return c, nil
}

// ownCopy copies what the caller could modify afterwards (events,
// headers, retry policy, enabled) and fills in Enabled.
func ownCopy(def Trigger) Trigger {
	def.Events = append([]string(nil), def.Events...)
	if def.TokenScope != nil { // an empty list stays one: compileFormat refuses it
		def.TokenScope = append(make([]string, 0, len(def.TokenScope)), def.TokenScope...)
	}
	if def.Headers != nil {
		def.Headers = maps.Clone(def.Headers)
	}
	if def.RetryPolicy != nil {
		rp := *def.RetryPolicy
		def.RetryPolicy = &rp
	}
	on := def.Enabled == nil || *def.Enabled
	def.Enabled = &on
	return def
}

// compileMatch checks what a change must be to match: database, collection
// pattern and events.
func (c *Compiled) compileMatch(def *Trigger) error {
	if def.Database == "" {
		def.Database = DefaultDatabase
	}
	if !collections.ValidDatabase(def.Database) {
		return fmt.Errorf("database: %q must be 1 to %d characters of [A-Za-z0-9_-]", def.Database, collections.MaxDatabaseName)
	}

	if def.Collection == "" {
		return fmt.Errorf("collection: missing (a collection pattern such as \"users/{userId}/messages\")")
	}
	pat, err := pathpattern.Compile(def.Collection)
	if err != nil {
		return fmt.Errorf("collection %q: %v", def.Collection, err)
	}
	if !pat.HasRest() && pat.Segments()%2 == 0 {
		return fmt.Errorf("collection %q: %d segments name a document; a collection pattern has an odd number of segments (or ends with ** or {name=**})", def.Collection, pat.Segments())
	}
	c.pat = pat

	if len(def.Events) == 0 {
		return fmt.Errorf("events: empty (want some of create, update, delete)")
	}
	for _, e := range def.Events {
		m := maskOf(collections.ChangeOp(e))
		if m == 0 {
			return fmt.Errorf("events: unknown event %q (want create, update or delete)", e)
		}
		if c.ops&m != 0 {
			return fmt.Errorf("events: %q listed twice", e)
		}
		c.ops |= m
	}
	return nil
}

// compileCEL compiles the condition, the ordering key and deliverAt.
func (c *Compiled) compileCEL(def *Trigger) error {
	var err error
	if def.Condition != "" {
		if c.cond, err = compileCEL(def.Condition, outBool); err != nil {
			return fmt.Errorf("condition %q: %v", def.Condition, err)
		}
	}
	if def.OrderingKey != "" {
		if c.key, err = compileCEL(def.OrderingKey, outString); err != nil {
			return fmt.Errorf("orderingKey %q: %v", def.OrderingKey, err)
		}
	}
	if def.DeliverAt != "" {
		if def.OrderingKey != "" {
			// Rows of a key are delivered one at a time in commit order: a
			// scheduled row at the head would hold back every later one.
			return fmt.Errorf("deliverAt: cannot be combined with orderingKey (a scheduled delivery would hold back every later delivery of its key); drop one of them")
		}
		if c.at, err = compileCEL(def.DeliverAt, outTime); err != nil {
			return fmt.Errorf("deliverAt %q: %v", def.DeliverAt, err)
		}
	}
	return nil
}

// expandTarget expands ${VAR} in the url, header values and secret, and
// checks them.
func expandTarget(def *Trigger, expand Expander) error {
	var err error
	if def.URL, err = expandVars(def.URL, expand); err != nil {
		return fmt.Errorf("url: %v", err)
	}
	if err := checkURL(def.URL); err != nil {
		return fmt.Errorf("url: %v", err)
	}

	for _, k := range slices.Sorted(maps.Keys(def.Headers)) {
		if err := checkHeaderName(k); err != nil {
			return fmt.Errorf("headers: %v", err)
		}
		v, err := expandVars(def.Headers[k], expand)
		if err != nil {
			return fmt.Errorf("headers: %q: %v", k, err)
		}
		if strings.ContainsAny(v, "\r\n\x00") {
			return fmt.Errorf("headers: %q: the value contains CR, LF or NUL", k)
		}
		def.Headers[k] = v
	}

	if def.Secret, err = expandVars(def.Secret, expand); err != nil {
		return fmt.Errorf("secret: %v", err)
	}
	if def.Secret != "" {
		if err := checkSecret(def.Secret); err != nil {
			return fmt.Errorf("secret: %v", err)
		}
	}
	return nil
}

// compileSchedule reads the timeout and the retry policy.
func (c *Compiled) compileSchedule(def *Trigger) error {
	if def.Timeout != "" {
		d, err := time.ParseDuration(def.Timeout)
		if err != nil {
			return fmt.Errorf("timeout: %q is not a duration such as \"30s\"", def.Timeout)
		}
		if d < MinTimeout || d > MaxTimeout {
			return fmt.Errorf("timeout: %s is outside %s..%s", d, MinTimeout, MaxTimeout)
		}
		c.Timeout = d
	}

	rp := def.RetryPolicy
	if rp == nil {
		return nil
	}
	c.exponential = true
	if rp.MaxAttempts != 0 {
		if rp.MaxAttempts < 1 || rp.MaxAttempts > MaxMaxAttempts {
			return fmt.Errorf("retryPolicy.maxAttempts: %d is outside 1..%d", rp.MaxAttempts, MaxMaxAttempts)
		}
		c.attempts = rp.MaxAttempts
	}
	var err error
	if c.initBackoff, err = positiveDuration(rp.InitialBackoff, DefaultInitialBackoff); err != nil {
		return fmt.Errorf("retryPolicy.initialBackoff: %v", err)
	}
	if c.maxBack, err = positiveDuration(rp.MaxBackoff, DefaultMaxBackoff); err != nil {
		return fmt.Errorf("retryPolicy.maxBackoff: %v", err)
	}
	if c.initBackoff > c.maxBack {
		return fmt.Errorf("retryPolicy: initialBackoff %s is more than maxBackoff %s", c.initBackoff, c.maxBack)
	}
	return nil
}

// ParseFile decodes a triggers.json array (unknown keys are an error,
// duplicate triggerIds are an error) and compiles every trigger. Errors
// name the trigger id (or index), the field, and for CEL the expression and
// the CEL error text.
func ParseFile(b []byte, expand Expander) ([]*Compiled, error) {
	var raw []json.RawMessage
	if err := strictDecode(b, &raw); err != nil {
		return nil, fmt.Errorf("triggers: not a JSON array of triggers: %v", err)
	}
	if raw == nil && !bytes.Equal(bytes.TrimSpace(b), []byte("[]")) {
		return nil, fmt.Errorf("triggers: not a JSON array of triggers (got null)")
	}
	out := make([]*Compiled, 0, len(raw))
	seen := make(map[string]int, len(raw))
	for i, r := range raw {
		var def Trigger
		if err := strictDecode(r, &def); err != nil {
			return nil, fmt.Errorf("triggers: trigger #%d%s: %v", i+1, idHint(r), err)
		}
		if bytes.Equal(bytes.TrimSpace(r), []byte("null")) {
			return nil, fmt.Errorf("triggers: trigger #%d: null is not a trigger", i+1)
		}
		c, err := Compile(def, expand)
		if err != nil {
			return nil, fmt.Errorf("triggers: trigger #%d: %w", i+1, err)
		}
		if j, dup := seen[def.ID]; dup {
			return nil, fmt.Errorf("triggers: trigger #%d: triggerId %q is already used by trigger #%d", i+1, def.ID, j)
		}
		seen[def.ID] = i + 1
		out = append(out, c)
	}
	return out, nil
}

// LoadFile reads and parses a triggers.json file (see ParseFile).
func LoadFile(path string, expand Expander) ([]*Compiled, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("triggers: %w", err)
	}
	cs, err := ParseFile(b, expand)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return cs, nil
}

// strictDecode decodes exactly one JSON value, refusing unknown object keys
// and trailing data.
func strictDecode(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if _, err := dec.Token(); err != io.EOF {
		return fmt.Errorf("unexpected data after the JSON value")
	}
	return nil
}

// idHint names the triggerId of an entry that failed to decode, if it has
// a readable one.
func idHint(r json.RawMessage) string {
	var v struct {
		ID string `json:"triggerId"`
	}
	if json.Unmarshal(r, &v) == nil && v.ID != "" {
		return fmt.Sprintf(" (triggerId %q)", v.ID)
	}
	return ""
}

// Match returns the pattern captures when the trigger listens to this
// change's db, op and collection; ok=false otherwise. It evaluates no CEL.
// collection is the document's collection path. params is nil when the
// pattern captures nothing. The enabled flag is the caller's business.
func (c *Compiled) Match(db string, op collections.ChangeOp, collection string) (params map[string]string, ok bool) {
	if c.ops&maskOf(op) == 0 || db != c.Def.Database {
		return nil, false
	}
	var (
		segBuf [16]string
		capBuf [8]pathpattern.Capture
	)
	caps, ok := c.pat.Match(collection, pathpattern.Split(segBuf[:0], collection), capBuf[:0])
	if !ok {
		return nil, false
	}
	if len(caps) > 0 {
		params = make(map[string]string, len(caps))
		for _, cp := range caps {
			params[cp.Name] = cp.Value
		}
	}
	return params, true
}

// MaxAttempts is how many delivery attempts an event gets, the first
// included.
func (c *Compiled) MaxAttempts() int { return c.attempts }

// Backoff is the delay before attempt n+1 after attempt n (1-based) failed,
// with ±20% jitter: rnd returns a number in [0, 1) (nil: math/rand/v2).
// Without a retryPolicy the delays are 5s, 5m, 30m, 2h, 5h, 10h, 10h (and
// 10h beyond); with one, initialBackoff doubled per attempt up to
// maxBackoff.
func (c *Compiled) Backoff(n int, rnd func() float64) time.Duration {
	if n < 1 {
		n = 1
	}
	var d time.Duration
	if !c.exponential {
		d = defaultSchedule[min(n, len(defaultSchedule))-1]
	} else {
		d = c.initBackoff
		for i := 1; i < n && d < c.maxBack; i++ {
			d *= 2
		}
		d = min(d, c.maxBack)
	}
	if rnd == nil {
		rnd = rand.Float64
	}
	f := 1 + jitter*(2*rnd()-1)
	return time.Duration(float64(d) * f)
}

func positiveDuration(s string, def time.Duration) (time.Duration, error) {
	if s == "" {
		return def, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("%q is not a duration such as \"5s\"", s)
	}
	if d <= 0 {
		return 0, fmt.Errorf("%s is not positive", d)
	}
	return d, nil
}

// expandVars replaces ${VAR} with expand(VAR). A "$" not followed by "{"
// stays as it is.
func expandVars(s string, expand Expander) (string, error) {
	if !strings.Contains(s, "${") {
		return s, nil
	}
	var b strings.Builder
	for {
		i := strings.Index(s, "${")
		if i < 0 {
			b.WriteString(s)
			return b.String(), nil
		}
		b.WriteString(s[:i])
		j := strings.IndexByte(s[i:], '}')
		if j < 0 {
			return "", fmt.Errorf("unterminated ${ in %q", s)
		}
		name := s[i+2 : i+j]
		if !validVarName(name) {
			return "", fmt.Errorf("${%s}: not a variable name ([A-Za-z_][A-Za-z0-9_]*)", name)
		}
		if expand == nil {
			return "", fmt.Errorf("${%s}: no variables can be expanded here", name)
		}
		v, err := expand(name)
		if err != nil {
			return "", fmt.Errorf("${%s}: %v", name, err)
		}
		b.WriteString(v)
		s = s[i+j+1:]
	}
}

func validVarName(s string) bool { return pathpattern.IsIdent(s) }

func checkURL(s string) error {
	if s == "" {
		return fmt.Errorf("missing")
	}
	u, err := url.Parse(s)
	if err != nil {
		return fmt.Errorf("%q does not parse: %v", s, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return fmt.Errorf("%q: the scheme must be http or https", s)
	}
	if u.Hostname() == "" {
		return fmt.Errorf("%q has no host", s)
	}
	if u.User != nil {
		return fmt.Errorf("%q: no user info in the url; use headers", s)
	}
	return nil
}

// checkHeaderName refuses invalid names and the headers Loom sets itself.
func checkHeaderName(k string) error {
	if k == "" {
		return fmt.Errorf("empty header name")
	}
	for i := 0; i < len(k); i++ {
		if !isTokenChar(k[i]) {
			return fmt.Errorf("%q is not a valid header name", k)
		}
	}
	l := strings.ToLower(k)
	switch {
	case l == "content-type", l == "user-agent", l == "content-length", l == "host",
		l == "transfer-encoding", l == "connection", strings.HasPrefix(l, "webhook-"):
		return fmt.Errorf("%q is set by Loom and cannot be overridden", k)
	}
	return nil
}

// isTokenChar reports whether c may appear in an HTTP token (RFC 9110).
func isTokenChar(c byte) bool {
	switch {
	case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		return true
	}
	return strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}

func checkSecret(s string) error {
	const prefix = "whsec_"
	if !strings.HasPrefix(s, prefix) {
		return fmt.Errorf("must be whsec_<base64> (a Standard Webhooks secret)")
	}
	key, err := base64.StdEncoding.DecodeString(s[len(prefix):])
	if err != nil {
		return fmt.Errorf("the part after whsec_ is not standard base64")
	}
	if len(key) < minSecretBytes || len(key) > maxSecretBytes {
		return fmt.Errorf("decodes to %d bytes; want %d to %d", len(key), minSecretBytes, maxSecretBytes)
	}
	return nil
}

func validID(s string) bool { return validName(s, maxIDLen) }

func validName(s string, max int) bool {
	if s == "" || len(s) > max {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '_', c == '-':
		default:
			return false
		}
	}
	return true
}
