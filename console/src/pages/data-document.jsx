// A document on the Data page: its envelope, a JSON editor of its user
// fields saved with If-Match (a concurrent change answers 412 with the
// current document, shown side by side with the edit), delete, and its
// subcollections.
import { useState } from 'preact/hooks';
import { api, docURL } from '../api.js';
import { ErrorBox, Json, Time, useAsync } from '../ui.jsx';
import { JsonArea, catalogPage, dataChanged, dataHref, fieldsText, hasLossyNumbers, isSystem, parseObject, userFields } from './data-util.jsx';

const ifMatch = (version) => ({ headers: { 'If-Match': `"${version}"` } });

function Envelope({ doc }) {
  return (
    <table class="envelope" data-testid="doc-envelope">
      <tbody>
        <tr>
          <th>id</th>
          <td class="mono">{doc.id}</td>
          <th>version</th>
          <td data-testid="doc-version">{doc.version}</td>
        </tr>
        <tr>
          <th>collection</th>
          <td class="mono">{doc.collection}</td>
          <th>created</th>
          <td>
            <Time value={doc.createdAt} />
          </td>
        </tr>
        <tr>
          <th />
          <td />
          <th>updated</th>
          <td>
            <Time value={doc.updatedAt} />
          </td>
        </tr>
      </tbody>
    </table>
  );
}

/**
 * The 412 answer of a save or delete: the current document (null when it
 * was deleted meanwhile) beside the edit, with the ways out.
 */
function Conflict({ db, collection, conflict, mine, invalid, onReload, onRetry, busy }) {
  const { current, action } = conflict;
  return (
    <div class="panel conflict" data-testid="doc-conflict" role="alert">
      <h3>Someone else changed this document</h3>
      <p class="small muted" data-testid="conflict-status">
        HTTP {conflict.status} {conflict.code}: the version you edited is no longer the current one.
      </p>
      {current ? (
        <p>
          Your {action} was refused: the document is now at version <b data-testid="conflict-version">{current.version}</b> (updated{' '}
          <Time value={current.updatedAt} />
          ).
        </p>
      ) : (
        <p data-testid="conflict-deleted">
          It was deleted meanwhile: there is no current version. <a href={dataHref(db, collection)}>Back to {collection}</a>
        </p>
      )}
      <div class="side-by-side">
        <div>
          <h4>Current</h4>
          {current ? <Json value={userFields(current)} testid="conflict-current" /> : <p class="muted">(deleted)</p>}
        </div>
        {action === 'save' ? (
          <div>
            <h4>Your edit</h4>
            <pre class="json" data-testid="conflict-mine">
              {mine}
            </pre>
          </div>
        ) : null}
      </div>
      <div class="row">
        {current ? (
          <button data-testid="conflict-reload" onClick={onReload} disabled={busy}>
            Reload current
          </button>
        ) : null}
        {current && action === 'save' ? (
          <button class="danger" data-testid="conflict-overwrite" onClick={onRetry} disabled={busy || invalid}>
            Overwrite
          </button>
        ) : null}
        {current && action === 'delete' ? (
          <button class="danger" data-testid="conflict-delete" onClick={onRetry} disabled={busy}>
            Delete anyway
          </button>
        ) : null}
        {!current && action === 'save' ? (
          <button data-testid="conflict-recreate" onClick={onRetry} disabled={busy || invalid}>
            Recreate from my edit
          </button>
        ) : null}
      </div>
    </div>
  );
}

function Subcollections({ db, path }) {
  const { data, error } = useAsync(() => catalogPage(db, 'collections', null, path), [db, path, dataChanged.value]);
  return (
    <div class="panel" data-testid="doc-subcollections">
      <h3>Subcollections</h3>
      <ErrorBox error={error} />
      {data && !data.items.length ? <p class="muted">None.</p> : null}
      {data ? (
        <ul class="plain">
          {data.items.map((p) => (
            <li key={p}>
              <a href={dataHref(db, p)} class="mono" data-testid={`subcollection-${p}`}>
                {p.split('/').pop()}
              </a>
            </li>
          ))}
          {data.next ? <li class="muted small">… more in the tree</li> : null}
        </ul>
      ) : null}
    </div>
  );
}

function Editor({ db, path, loaded }) {
  const [doc, setDoc] = useState(loaded);
  const [text, setText] = useState(() => fieldsText(loaded));
  const [conflict, setConflict] = useState(null);
  const [error, setError] = useState(null);
  const [notice, setNotice] = useState('');
  const [busy, setBusy] = useState(false);
  const [confirming, setConfirming] = useState(false);
  const parsed = parseObject(text);
  const system = isSystem(path);
  const dirty = text !== fieldsText(doc);

  function adopt(d, msg) {
    setDoc(d);
    setText(fieldsText(d));
    setConflict(null);
    setError(null);
    setNotice(msg);
  }

  // Runs a write; a 412 opens the conflict panel for action.
  async function attempt(action, fn) {
    setBusy(true);
    setError(null);
    setNotice('');
    try {
      await fn();
    } catch (err) {
      if (err.status === 412 && err.details && 'current' in err.details) {
        setConflict({ action, current: err.details.current, status: err.status, code: err.code });
      } else {
        setError(err);
      }
    } finally {
      setBusy(false);
    }
  }

  // version: the If-Match precondition (null: none, to recreate).
  const save = (version) =>
    attempt('save', async () => {
      const res = await api.put(docURL(db, path), { doc: parsed.value }, version == null ? {} : ifMatch(version));
      adopt(res.body, `Saved: version ${res.body.version}.`);
      if (res.status === 201) dataChanged.value++;
    });

  const remove = (version) =>
    attempt('delete', async () => {
      await api.del(docURL(db, path), ifMatch(version));
      dataChanged.value++;
      location.hash = dataHref(db, doc.collection);
    });

  return (
    <>
      <div class="panel">
        <Envelope doc={doc} />
      </div>
      {hasLossyNumbers(doc) ? (
        <div class="error" data-testid="doc-lossy">
          This document holds integers beyond 2^53, which this page cannot represent exactly: saving here would round them.
        </div>
      ) : null}
      {conflict ? (
        <Conflict
          db={db}
          collection={doc.collection}
          conflict={conflict}
          mine={text}
          invalid={!!parsed.error}
          busy={busy}
          onReload={() => adopt(conflict.current, 'Reloaded the current version.')}
          onRetry={() => (conflict.action === 'delete' ? remove(conflict.current.version) : save(conflict.current ? conflict.current.version : null))}
        />
      ) : null}
      <div class="panel">
        <div class="row spread">
          <h3>Fields</h3>
          {system ? <span class="muted small">System collection: read only.</span> : null}
        </div>
        <JsonArea text={text} onChange={setText} testid="doc-editor" rows={16} readOnly={system} />
        <ErrorBox error={error} testid="doc-error" />
        {notice ? (
          <div class="notice" data-testid="doc-notice">
            {notice}
          </div>
        ) : null}
        {system ? null : (
          <div class="row">
            <button class="primary" data-testid="doc-save" disabled={busy || !!parsed.error || !dirty || !!conflict} onClick={() => save(doc.version)}>
              Save
            </button>
            <button data-testid="doc-revert" disabled={busy || !dirty} onClick={() => setText(fieldsText(doc))}>
              Revert
            </button>
            <span class="grow" />
            {confirming ? (
              <>
                <span>Delete {path}?</span>
                <button class="danger" data-testid="doc-delete-confirm" disabled={busy} onClick={() => (setConfirming(false), remove(doc.version))}>
                  Yes, delete
                </button>
                <button data-testid="doc-delete-cancel" onClick={() => setConfirming(false)}>
                  Keep
                </button>
              </>
            ) : (
              <button class="danger" data-testid="doc-delete" disabled={busy} onClick={() => setConfirming(true)}>
                Delete…
              </button>
            )}
          </div>
        )}
      </div>
      <Subcollections db={db} path={path} />
    </>
  );
}

export default function DocumentView({ db, path }) {
  const { data, error, loading } = useAsync(async () => (await api.get(docURL(db, path))).body, [db, path]);
  // The editor holds its own copy from here on; keyed by path, it starts
  // afresh on another document (never with the previous one's data).
  return (
    <div data-testid="document-view">
      <ErrorBox error={error} testid="doc-load-error" />
      {loading ? <p class="muted">Loading…</p> : null}
      {data && !loading ? <Editor key={`${db}/${path}`} db={db} path={path} loaded={data} /> : null}
    </div>
  );
}
