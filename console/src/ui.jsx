// Small shared pieces every page uses.
import { useCallback, useEffect, useRef, useState } from 'preact/hooks';

/**
 * Runs an async loader on mount and whenever deps change; returns
 * {data, error, loading, reload}. A stale answer (deps changed meanwhile) is
 * dropped.
 */
export function useAsync(fn, deps) {
  const [state, setState] = useState({ data: null, error: null, loading: true });
  const gen = useRef(0);
  const run = useCallback(() => {
    const g = ++gen.current;
    setState((s) => ({ ...s, loading: true, error: null }));
    Promise.resolve()
      .then(fn)
      .then(
        (data) => g === gen.current && setState({ data, error: null, loading: false }),
        (error) => g === gen.current && setState({ data: null, error, loading: false }),
      );
  }, deps);
  useEffect(run, [run]);
  return { ...state, reload: run };
}

/** An API error (code and message as the server wrote them), or nothing. */
export function ErrorBox({ error, testid = 'error' }) {
  if (!error) return null;
  return (
    <div class="error" data-testid={testid} role="alert">
      {error.code ? <b>{error.code}</b> : null} {error.message || String(error)}
    </div>
  );
}

/** Pretty-printed JSON. */
export function Json({ value, testid }) {
  return (
    <pre class="json" data-testid={testid}>
      {JSON.stringify(value, null, 2)}
    </pre>
  );
}

/** A timestamp (ms since the epoch, or an RFC 3339 string) in local time. */
export function Time({ value }) {
  if (value === undefined || value === null || value === '') return <span class="muted">—</span>;
  const d = new Date(typeof value === 'number' ? value : String(value));
  if (Number.isNaN(d.getTime())) return <span>{String(value)}</span>;
  return <time dateTime={d.toISOString()} title={d.toISOString()}>{d.toLocaleString()}</time>;
}

/** A status word with a colour by meaning. */
export function Badge({ status, testid }) {
  const s = String(status ?? '');
  const tone = /^(ok|enabled|delivered|success|completed|live|active)$/.test(s)
    ? 'good'
    : /^(dead|failed|error|disabled|canceled)$/.test(s)
      ? 'bad'
      : 'neutral';
  return (
    <span class={`badge ${tone}`} data-testid={testid}>
      {s}
    </span>
  );
}

/** "Load more" for cursor-paged lists. */
export function More({ cursor, onMore, loading, testid = 'more' }) {
  if (!cursor) return null;
  return (
    <button class="more" data-testid={testid} disabled={loading} onClick={onMore}>
      {loading ? 'Loading…' : 'Load more'}
    </button>
  );
}

/**
 * A secret shown exactly once (a new service key, a trigger's generated or
 * rotated secret): the page keeps it only until this is dismissed.
 */
export function ShowOnce({ title, secret, onClose }) {
  if (!secret) return null;
  return (
    <div class="modal" role="dialog" aria-label={title}>
      <div class="modal-body" data-testid="secret-once">
        <h3>{title}</h3>
        <p>Copy it now: it is not shown again.</p>
        <code class="secret" data-testid="secret-value">
          {secret}
        </code>
        <div class="row">
          <button data-testid="secret-copy" onClick={() => navigator.clipboard?.writeText(secret)}>
            Copy
          </button>
          <button data-testid="secret-close" onClick={onClose}>
            Done
          </button>
        </div>
      </div>
    </div>
  );
}

/** A page title with optional actions on the right. */
export function Header({ title, children }) {
  return (
    <div class="page-header">
      <h2>{title}</h2>
      <div class="actions">{children}</div>
    </div>
  );
}
