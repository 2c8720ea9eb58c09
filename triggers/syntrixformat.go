package triggers

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/loomdb/loom/collections"
	"github.com/loomdb/loom/internal/pathpattern"
)

// The Syntrix webhook format (docs/syntrix.md, "Trigger API and the
// Syntrix webhook format"): a trigger with "format": "syntrix" is delivered
// with the body Syntrix's trigger worker sends (its DeliveryTask), which
// Syntrix's TriggerHandler reads (sdk/syntrix-client-ts/src/trigger/
// trigger-handler.ts): triggerId, collection, docKey, before, after and a
// preIssuedToken, a short-lived credential for /trigger/v1. The Standard
// Webhooks headers are the same as in Loom's format, signed over this body.

// Webhook body formats.
const (
	FormatLoom    = "loom"
	FormatSyntrix = "syntrix"
)

const (
	// MaxTokenScope bounds the patterns of a tokenScope.
	MaxTokenScope = 16
	// MaxTokenTTL bounds a preIssuedToken's lifetime; it is also cut to
	// the trigger's timeout plus tokenGrace.
	MaxTokenTTL = 15 * time.Minute
	tokenGrace  = 5 * time.Minute
)

// TokenRequest asks Config.IssueToken for the preIssuedToken of one
// delivery attempt.
type TokenRequest struct {
	TriggerID string
	Database  string
	// Scope are path patterns (internal/pathpattern syntax) with the
	// event's captures bound: the token may read, write and query only
	// documents they match.
	Scope []string
	// Delivery is the outbox row the attempt is for.
	Delivery string
	TTL      time.Duration
}

// compileFormat checks format and tokenScope. A tokenScope capture is
// bound to the event's value of the collection capture of that name, so it
// must be one; {name=**} is refused (it would bind a rest capture to a
// value, not stand for "everything below": write ** for that).
func (c *Compiled) compileFormat(def *Trigger) error {
	switch def.Format {
	case "", FormatLoom, FormatSyntrix:
	default:
		return fmt.Errorf("format: %q is not a webhook format (want \"loom\", the default, or \"syntrix\")", def.Format)
	}
	if def.TokenScope == nil {
		return nil
	}
	if def.Format != FormatSyntrix {
		return fmt.Errorf("tokenScope: only with \"format\": \"syntrix\" (the other formats carry no token)")
	}
	if len(def.TokenScope) == 0 || len(def.TokenScope) > MaxTokenScope {
		return fmt.Errorf("tokenScope: 1 to %d path patterns (leave it out for the default: the event's collection and below)", MaxTokenScope)
	}
	names := c.pat.Names()
	for _, src := range def.TokenScope {
		p, err := pathpattern.Compile(src)
		if err != nil {
			return fmt.Errorf("tokenScope %q: %v", src, err)
		}
		if p.RestName() != "" {
			return fmt.Errorf("tokenScope %q: {%s=**} cannot be bound; end the pattern with ** for everything below", src, p.RestName())
		}
		for _, n := range p.Names() {
			if !contains(names, n) {
				return fmt.Errorf("tokenScope %q: {%s} is not a capture of the collection pattern %q, so nothing binds it", src, n, def.Collection)
			}
		}
		if p.Segments() > 0 && strings.HasPrefix(p.Segment(0).Literal, "_") {
			return fmt.Errorf("tokenScope %q: system collections (starting with _) cannot be granted", src)
		}
		if !p.HasRest() && p.Segments()%2 != 0 {
			return fmt.Errorf("tokenScope %q: %d segments name a collection; a scope pattern names documents (an even number of segments, or ending with **)", src, p.Segments())
		}
		c.scope = append(c.scope, p)
	}
	return nil
}

// tokenScope is the scope of a delivery's token: the tokenScope patterns
// with the event's params bound, or by default the event's collection and
// everything below it. Every result is checked to compile, so a token is
// never minted with a scope the server would read differently.
func (c *Compiled) tokenScope(params map[string]string, collection string) ([]string, error) {
	var out []string
	if c.scope == nil {
		if collection == "" {
			return nil, fmt.Errorf("the event has no collection")
		}
		out = []string{collection + "/**"}
	}
	for _, p := range c.scope {
		var b strings.Builder
		for i := 0; i < p.Segments(); i++ {
			if i > 0 {
				b.WriteByte('/')
			}
			switch s := p.Segment(i); {
			case s.Literal != "":
				b.WriteString(s.Literal)
			case s.Wild:
				b.WriteByte('*')
			default:
				v := params[s.Name]
				if v == "" {
					return nil, fmt.Errorf("tokenScope %q: the event has no value for {%s}", p.String(), s.Name)
				}
				b.WriteString(v)
			}
		}
		if p.HasRest() {
			if p.Segments() > 0 {
				b.WriteByte('/')
			}
			b.WriteString("**")
		}
		out = append(out, b.String())
	}
	for _, s := range out {
		p, err := pathpattern.Compile(s)
		if err != nil {
			return nil, fmt.Errorf("token scope %q: %v", s, err)
		}
		if !p.HasRest() && p.Segments()%2 != 0 {
			return nil, fmt.Errorf("token scope %q names no document", s)
		}
		if collections.IsSystemPath(s) {
			return nil, fmt.Errorf("token scope %q is a system collection", s)
		}
	}
	return out, nil
}

// tokenTTL is how long a delivery's token lives: the trigger's timeout
// plus a grace for the handler's writes after it answered, at most
// MaxTokenTTL.
func (c *Compiled) tokenTTL() time.Duration { return min(MaxTokenTTL, c.Timeout+tokenGrace) }

// syntrixRetry is a retryPolicy as Syntrix echoes it.
type syntrixRetry struct {
	MaxAttempts    int    `json:"maxAttempts"`
	InitialBackoff string `json:"initialBackoff"`
	MaxBackoff     string `json:"maxBackoff"`
}

// syntrixDelivery is the body: Syntrix's DeliveryTask (as its integration
// tests' WebhookDelivery struct decodes it) plus docKey (what the older
// DeliveryTask and the SDK's WebhookPayload call the document; here its
// path), eventId and attempt.
type syntrixDelivery struct {
	TriggerID      string            `json:"triggerId"`
	Database       string            `json:"database"`
	Event          string            `json:"event"`
	Collection     string            `json:"collection"`
	DocumentID     string            `json:"documentId"`
	DocKey         string            `json:"docKey"`
	LSN            string            `json:"lsn"`
	Seq            int64             `json:"seq"`
	Before         json.RawMessage   `json:"before,omitempty"`
	After          json.RawMessage   `json:"after,omitempty"`
	Timestamp      int64             `json:"ts"`
	URL            string            `json:"url"`
	Headers        map[string]string `json:"headers"`
	SecretsRef     string            `json:"secretsRef"`
	RetryPolicy    syntrixRetry      `json:"retryPolicy"`
	Timeout        string            `json:"timeout"`
	PreIssuedToken string            `json:"preIssuedToken"`
	Payload        map[string]any    `json:"payload,omitempty"`
	SubjectHashed  bool              `json:"subjectHashed"`
	EventID        string            `json:"eventId"`
	Attempt        int               `json:"attempt"`
}

// syntrixToken mints the preIssuedToken of one attempt of d.
func (dv *deliverer) syntrixToken(e *entry, d *Delivery) (string, error) {
	if dv.cfg.IssueToken == nil {
		return "", fmt.Errorf("format \"syntrix\" needs the auth service to sign its preIssuedToken, and none is configured")
	}
	params := map[string]string{}
	if m, ok := d.event["params"].(map[string]any); ok {
		for k, v := range m {
			params[k] = str(v)
		}
	}
	scope, err := e.c.tokenScope(params, str(d.event["collection"]))
	if err != nil {
		return "", err
	}
	return dv.cfg.IssueToken(TokenRequest{
		TriggerID: d.TriggerID,
		Database:  e.c.Def.Database,
		Scope:     scope,
		Delivery:  d.ID,
		TTL:       e.c.tokenTTL(),
	})
}

// syntrixBody builds the body of one attempt of d in the Syntrix format.
// Of the trigger's configuration it echoes the url without its query (a
// ${VAR} secret there stays out of the body), no header values (they may
// be credentials; the headers themselves are sent as usual), and no
// secret (secretsRef is "").
func syntrixBody(e *entry, d *Delivery, token string) ([]byte, error) {
	ev := d.event
	typ := str(ev["type"])
	b := syntrixDelivery{
		TriggerID:      d.TriggerID,
		Database:       str(ev["database"]),
		Event:          typ,
		Collection:     str(ev["collection"]),
		DocumentID:     str(ev["id"]),
		DocKey:         str(ev["path"]),
		LSN:            strconv.FormatInt(d.Seq, 10),
		Seq:            d.Seq,
		URL:            bareURL(e.c.Def.URL),
		Headers:        map[string]string{},
		RetryPolicy:    e.c.syntrixRetry(),
		Timeout:        e.c.Timeout.String(),
		PreIssuedToken: token,
		EventID:        d.EventID,
		Attempt:        len(d.Attempts) + 1,
	}
	b.Timestamp, _ = collections.Int64(ev["timestamp"])
	doc, _ := ev["document"].(map[string]any)
	before, _ := ev["before"].(map[string]any)
	var err error
	if before != nil {
		if b.Before, err = flatDoc(before); err != nil {
			return nil, err
		}
	}
	if doc != nil && typ != string(collections.OpDelete) {
		if b.After, err = flatDoc(doc); err != nil {
			return nil, err
		}
	}
	if doc != nil {
		// The document's data with its id, as Syntrix's payload (on a
		// delete, the last state).
		data, _ := doc["data"].(map[string]any)
		b.Payload = maps.Clone(data)
		if b.Payload == nil {
			b.Payload = map[string]any{}
		}
		b.Payload["id"] = str(doc["id"])
	}
	return json.Marshal(b)
}

// flatDoc is an event envelope map as Loom's REST document: {id,
// collection, version, createdAt, updatedAt, ...data}.
func flatDoc(env map[string]any) (json.RawMessage, error) {
	d := collections.Document{ID: str(env["id"]), Collection: str(env["collection"]), Path: str(env["path"])}
	d.Version, _ = collections.Int64(env["version"])
	d.CreatedAt, _ = collections.Int64(env["createdAt"])
	d.UpdatedAt, _ = collections.Int64(env["updatedAt"])
	d.Data, _ = env["data"].(map[string]any)
	var buf bytes.Buffer
	if err := d.AppendJSON(&buf); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func (c *Compiled) syntrixRetry() syntrixRetry {
	r := syntrixRetry{MaxAttempts: c.attempts, InitialBackoff: DefaultInitialBackoff.String(), MaxBackoff: DefaultMaxBackoff.String()}
	if c.exponential {
		r.InitialBackoff, r.MaxBackoff = c.initBackoff.String(), c.maxBack.String()
	}
	return r
}

// bareURL is u without user info, query and fragment.
func bareURL(u string) string {
	p, err := url.Parse(u)
	if err != nil {
		return ""
	}
	p.User, p.RawQuery, p.ForceQuery, p.Fragment, p.RawFragment = nil, "", false, "", ""
	return p.String()
}

// redactToken removes the token from a receiver's answer before it is
// stored in the delivery log (a receiver echoing its request would
// otherwise put a live credential there). The answer is read up to
// maxResponse bytes, and a document's size moves the token in an echoed
// body: an answer cut off inside the token ends with a prefix of it, which
// goes too (all of it but a few characters of the signature would be a
// credential for a few guesses). A prefix shorter than minTokenPrefix is
// left: a JWT starts with the same few characters as any other. Without a
// token (every format but "syntrix") b is returned as is: no copy.
func redactToken(b []byte, token string) []byte {
	const minTokenPrefix = 16
	if token == "" {
		return b
	}
	tok, mark := []byte(token), []byte("[preIssuedToken]")
	b = bytes.ReplaceAll(b, tok, mark) // a copy: b is ours from here
	for n := min(len(tok)-1, len(b)); n >= minTokenPrefix; n-- {
		if bytes.HasSuffix(b, tok[:n]) {
			return append(b[:len(b)-n], mark...)
		}
	}
	return b
}

// compile is Compile with c.Expand, then admit: how a registered
// definition becomes a trigger of this service.
func (c *Config) compile(def Trigger) (*Compiled, error) {
	t, err := Compile(def, c.Expand)
	if err == nil {
		err = c.admit(t)
	}
	if err != nil {
		return nil, err
	}
	return t, nil
}

// admit refuses a trigger this service cannot deliver: format "syntrix"
// without IssueToken.
func (c *Config) admit(t *Compiled) error {
	if t.Def.Format == FormatSyntrix && c.IssueToken == nil {
		return fmt.Errorf("trigger %q: format \"syntrix\" needs the auth service (its webhooks carry a preIssuedToken signed with the auth secret), and this server has none; drop \"format\" or run with authentication", t.Def.ID)
	}
	return nil
}

// admitAll is admit over a list.
func (c *Config) admitAll(list []*Compiled) error {
	for _, t := range list {
		if err := c.admit(t); err != nil {
			return err
		}
	}
	return nil
}
