// Pieces the Data and Query pages share: the document envelope, a short
// preview of a document's fields, a JSON textarea checked as you type, and
// the documents table.
import { signal } from '@preact/signals';
import { useCallback, useEffect, useMemo, useRef, useState } from 'preact/hooks';
import { api } from '../api.js';
import { href } from '../router.js';
import { Time } from '../ui.jsx';

/** The server-owned names of a document's wire envelope (never user data). */
const ENVELOPE = ['id', 'collection', 'version', 'createdAt', 'updatedAt', 'deleted'];

/** A document's user fields, without its envelope. */
export function userFields(doc) {
  const out = {};
  for (const [k, v] of Object.entries(doc || {})) {
    if (!ENVELOPE.includes(k)) out[k] = v;
  }
  return out;
}

/** Pretty JSON of a document's user fields: what the editor starts from. */
export function fieldsText(doc) {
  return JSON.stringify(userFields(doc), null, 2);
}

/** The path of a document from its envelope. */
function pathOf(doc) {
  return `${doc.collection}/${doc.id}`;
}

/** The hash link of the Data page for a database and a collection or document path (and route params). */
export function dataHref(db, path, params) {
  return href('data', db, ...(path ? path.split('/') : []), ...(params ? [params] : []));
}

/** True for a path below a system collection (its first segment starts with "_"). */
export function isSystem(path) {
  return String(path || '').startsWith('_');
}

/** A one-line preview of a document's user fields, cut to max characters. */
export function preview(doc, max = 90) {
  const s = JSON.stringify(userFields(doc));
  return s.length > max ? `${s.slice(0, max - 1)}…` : s;
}

/**
 * Whether a parsed value holds an integer JavaScript cannot represent
 * exactly: the server keeps such numbers exact, but this page parses JSON
 * into doubles, so saving would round them.
 */
export function hasLossyNumbers(v) {
  if (typeof v === 'number') return Number.isInteger(v) && !Number.isSafeInteger(v);
  if (Array.isArray(v)) return v.some(hasLossyNumbers);
  if (v && typeof v === 'object') return Object.values(v).some(hasLossyNumbers);
  return false;
}

/**
 * Parses the text of a JSON object: {value} or {error}. Only an object is a
 * document.
 */
export function parseObject(text) {
  let v;
  try {
    v = JSON.parse(text);
  } catch (e) {
    return { error: e.message };
  }
  if (!v || typeof v !== 'object' || Array.isArray(v)) return { error: 'A document is a JSON object: {…}.' };
  const env = ENVELOPE.filter((k) => Object.hasOwn(v, k));
  if (env.length) return { error: `${env.join(', ')}: envelope names the server owns; remove them.` };
  return { value: v };
}

/**
 * A textarea for a JSON object, checked as you type: the parse error shows
 * under it (testid `${testid}-error`), and onChange gets the text.
 */
export function JsonArea({ text, onChange, testid, rows = 14, readOnly = false }) {
  const parsed = useMemo(() => parseObject(text), [text]);
  return (
    <div class="json-area">
      <textarea
        data-testid={testid}
        rows={rows}
        spellcheck={false}
        readOnly={readOnly}
        value={text}
        onInput={(e) => onChange(e.currentTarget.value)}
        class={parsed.error ? 'invalid' : ''}
      />
      {parsed.error ? (
        <div class="json-invalid" data-testid={`${testid}-error`}>
          {parsed.error}
        </div>
      ) : null}
    </div>
  );
}

/**
 * A table of documents: path or id, version, updatedAt, a preview. Each row
 * links to the document's Data page. showPath: show the full path (query
 * results span collections).
 */
export function DocTable({ db, docs, showPath = false, testid, rowTestid }) {
  if (!docs.length) return <p class="muted" data-testid={`${testid}-empty`}>No documents.</p>;
  // Scrolls sideways inside its panel on a narrow window, not the page.
  return (
    <div class="table-scroll">
    <table data-testid={testid} class="docs">
      <thead>
        <tr>
          <th>{showPath ? 'Path' : 'ID'}</th>
          <th>Version</th>
          <th>Updated</th>
          <th>Fields</th>
        </tr>
      </thead>
      <tbody>
        {docs.map((d) => {
          const p = pathOf(d);
          const link = dataHref(db, p);
          return (
            <tr key={p} class="clickable" data-testid={`${rowTestid}-${p}`} onClick={() => (location.hash = link)}>
              <td class="mono">
                <a href={link} onClick={(e) => e.stopPropagation()}>
                  {showPath ? p : d.id}
                </a>
                {d.deleted ? <span class="badge bad">deleted</span> : null}
              </td>
              <td>{d.version}</td>
              <td>
                <Time value={d.updatedAt} />
              </td>
              <td class="mono preview">{preview(d)}</td>
            </tr>
          );
        })}
      </tbody>
    </table>
    </div>
  );
}

/**
 * Bumped after the Data page creates or deletes a document, so listings
 * that show it (the tree, the collection table) load again.
 */
export const dataChanged = signal(0);

/**
 * A cursor-paged list: load(cursor) resolves {items, next}; the first page
 * loads on mount and whenever deps change. Returns {items, next, loading,
 * error, more}. An answer for stale deps is dropped.
 */
export function usePaged(load, deps) {
  const [state, setState] = useState({ items: [], next: null, loading: true, error: null });
  const gen = useRef(0);
  const fetchPage = useCallback((cursor, append) => {
    const g = gen.current;
    setState((s) => ({ ...s, loading: true, error: null }));
    load(cursor).then(
      ({ items, next }) =>
        g === gen.current && setState((s) => ({ items: append ? [...s.items, ...items] : items, next, loading: false, error: null })),
      (error) => g === gen.current && setState((s) => ({ ...s, loading: false, error })),
    );
  }, deps);
  useEffect(() => {
    gen.current++;
    setState({ items: [], next: null, loading: true, error: null });
    fetchPage(null, false);
  }, [fetchPage]);
  return { ...state, more: () => fetchPage(state.next, true) };
}

/**
 * A page of a catalog listing of db for usePaged: its 'collections' (top
 * level, or under the document path parent) or its 'groups', as {items:
 * [path or pattern], next}.
 */
export async function catalogPage(db, what, after, parent) {
  const qs = new URLSearchParams({ limit: '100' });
  if (parent) qs.set('parent', parent);
  if (after) qs.set('after', after);
  const res = await api.get(`/admin/v1/databases/${encodeURIComponent(db)}/${what}?${qs}`);
  return { items: res.body[what].map((x) => (what === 'groups' ? x.pattern : x.path)), next: res.body.nextCursor };
}
