// Access → security rules: GET /admin/v1/rules (where they come from, how
// many are in force, the file's text as it is on disk now, the last
// reload) and POST /admin/v1/rules/reload. A bad file is a 400 whose
// message carries the parse error; the server keeps the old rules, and the
// panel shows that message as is.
import { useState } from 'preact/hooks';
import { api } from '../api.js';
import { Badge, ErrorBox, Time, useAction, useAsync } from '../ui.jsx';

export default function Rules() {
  const info = useAsync(() => api.get('/admin/v1/rules').then((r) => r.body), []);
  const [result, setResult] = useState(null);
  const { busy, error, run } = useAction();

  function reload() {
    setResult(null);
    run(async () => {
      try {
        setResult((await api.post('/admin/v1/rules/reload')).body);
      } finally {
        info.reload();
      }
    });
  }

  const r = info.data;
  const last = r?.lastReload;
  return (
    <div class="panel" data-testid="rules-panel">
      <div class="page-header">
        <h3>Security rules</h3>
        <div class="actions">
          <button class="primary" data-testid="rules-reload" disabled={busy} onClick={reload}>
            {busy ? 'Reloading…' : 'Reload'}
          </button>
        </div>
      </div>
      <ErrorBox error={info.error} />
      <ErrorBox error={error} testid="rules-error" />
      {result ? (
        <p class="notice" data-testid="rules-ok">
          Reloaded: {result.rules} rules {result.builtin ? `built in (${result.fileAbsent ? `${result.file} does not exist yet` : 'no rules file'})` : `from ${result.file}`}.
        </p>
      ) : null}
      {r ? (
        <>
          <dl class="facts">
            <dt>Source</dt>
            <dd data-testid="rules-file">{r.builtin ? `built-in default rules${!r.file ? ' (no rules file)' : r.fileAbsent ? ` (${r.file} not created yet)` : ` (${r.file} exists but is not loaded: press Reload)`}` : r.file || 'none'}</dd>
            <dt>Rules in force</dt>
            <dd data-testid="rules-count">{r.rules}</dd>
            <dt>Last reload</dt>
            <dd data-testid="rules-last">
              {last ? (
                <>
                  <Badge status={last.ok ? 'ok' : 'failed'} /> <Time value={last.at} />
                  {last.error ? <span class="small"> — {last.error}</span> : null}
                </>
              ) : (
                <span class="muted">none since the server started</span>
              )}
            </dd>
          </dl>
          {r.builtin ? (
            <p class="small muted" data-testid="rules-builtin-hint">
              {r.file ? (
                <>
                  No rules file yet, so the built-in rules below are in force. To change them, save this text as{' '}
                  <code>{r.file}</code> (relative to the server's working directory), edit it and press Reload: from then on
                  Reload re-reads that file, and a bad file shows its error here while the rules in force stay.
                </>
              ) : (
                <>
                  This server runs the built-in rules below and has no rules file to reload. To use your own, name a file in{' '}
                  <code>[security] rules_file</code> and restart.
                </>
              )}
            </p>
          ) : (
            <p class="small muted">
              The text below is the file as it is on disk now; until a reload succeeds, the rules in force may be an older version. A
              reload acts on this node only.
            </p>
          )}
          {r.sourceError ? <div class="error">{r.sourceError}</div> : null}
          {r.source !== null && r.source !== undefined ? (
            <pre class="json" data-testid="rules-source">
              {r.source}
            </pre>
          ) : null}
          {r.truncated ? <p class="small muted">The file is longer than 1 MiB; only its start is shown.</p> : null}
        </>
      ) : null}
    </div>
  );
}
