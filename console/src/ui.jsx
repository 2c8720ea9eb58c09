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

/**
 * An action run from a button or form: {busy, error, run}.
 * run(fn) clears the error, marks busy while fn runs, and keeps what fn
 * threw as error (shown with <ErrorBox/>).
 */
export function useAction() {
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState(null);
  const run = async (fn) => {
    setBusy(true);
    setError(null);
    try {
      await fn();
    } catch (err) {
      setError(err);
    } finally {
      setBusy(false);
    }
  };
  return { busy, error, run };
}

/**
 * Calls fn every `every` ms while the page is visible (and once when it
 * becomes visible again); stops on unmount. fn should be cheap and quiet.
 */
export function useEvery(fn, every, deps) {
  const ref = useRef(fn);
  ref.current = fn;
  useEffect(() => {
    let timer = null;
    const arm = () => {
      clearInterval(timer);
      timer = document.hidden ? null : setInterval(() => ref.current(), every);
    };
    const onVisible = () => {
      if (!document.hidden) ref.current();
      arm();
    };
    arm();
    document.addEventListener('visibilitychange', onVisible);
    return () => {
      clearInterval(timer);
      document.removeEventListener('visibilitychange', onVisible);
    };
  }, [every, ...(deps || [])]);
}

/**
 * Loads fetch() on mount and when deps change, then again every `every` ms
 * while the page is visible: {data, setData, error, load}. One load at a
 * time; an answer for earlier deps is dropped.
 */
export function usePoll(fetch, every, deps = []) {
  const [data, setData] = useState(null);
  const [error, setError] = useState(null);
  const ref = useRef(fetch);
  ref.current = fetch;
  const gen = useRef(0);
  const inFlight = useRef(false);
  async function load() {
    if (inFlight.current) return;
    inFlight.current = true;
    const g = gen.current;
    try {
      const d = await ref.current();
      if (g === gen.current) {
        setData(d);
        setError(null);
      }
    } catch (err) {
      if (g === gen.current) setError(err);
    } finally {
      if (g === gen.current) inFlight.current = false;
    }
  }
  useEffect(() => {
    gen.current++;
    inFlight.current = false;
    setData(null);
    load();
  }, deps);
  useEvery(load, every, deps);
  return { data, setData, error, load };
}

/** A duration in ms: "340 ms", "1.2 s", "2 min 5 s"; null for a missing or negative one. */
export function fmtDuration(ms) {
  if (ms === null || ms === undefined || Number.isNaN(ms) || ms < 0) return null;
  return ms < 1000 ? `${Math.round(ms)} ms` : ms < 60000 ? `${(ms / 1000).toFixed(1)} s` : `${Math.floor(ms / 60000)} min ${Math.round((ms % 60000) / 1000)} s`;
}

/** The value of a JSON text, or the text itself when it is not JSON (a non-string is returned as is). */
export function parseJSONOr(text) {
  if (typeof text !== 'string') return text;
  try {
    return JSON.parse(text);
  } catch {
    return text;
  }
}
