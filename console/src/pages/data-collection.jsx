// A collection on the Data page: its documents paged 50 at a time in a
// chosen order, and a form to create a document.
import { useState } from 'preact/hooks';
import { api, docURL, pageOf } from '../api.js';
import { route } from '../router.js';
import { ErrorBox, More, useAction } from '../ui.jsx';
import { DocTable, JsonArea, dataChanged, dataHref, hasLossyNumbers, isSystem, parseObject, usePaged } from './data-util.jsx';

const PAGE = 50;

// The listing's orderBy parameter per choice ("" = by id, the default).
const ORDERS = [
  ['', 'ID'],
  ['createdAt:desc', 'Newest first'],
  ['createdAt:asc', 'Oldest first'],
  ['updatedAt:desc', 'Recently updated'],
  ['updatedAt:asc', 'Least recently updated'],
];

function NewDocument({ db, collection, onClose }) {
  const [id, setId] = useState('');
  const [text, setText] = useState('{\n  \n}');
  const { busy, error, run } = useAction();
  const parsed = parseObject(text);

  function submit(e) {
    e.preventDefault();
    if (parsed.error) return;
    run(async () => {
      // POST creates and never replaces: a taken id is an error (409),
      // where a PUT would silently overwrite the existing document.
      const body = id.trim() ? { ...parsed.value, id: id.trim() } : parsed.value;
      const res = await api.post(docURL(db, collection), body);
      dataChanged.value++;
      location.hash = dataHref(db, `${collection}/${res.body.id}`);
    });
  }

  return (
    <form class="panel new-doc" data-testid="new-doc-form" onSubmit={submit}>
      <h3>New document in {collection}</h3>
      <label>
        ID (empty: generated)
        <input data-testid="new-doc-id" value={id} onInput={(e) => setId(e.currentTarget.value)} placeholder="generated" />
      </label>
      <label>Fields (JSON object)</label>
      <JsonArea text={text} onChange={setText} testid="new-doc-json" rows={8} />
      {!parsed.error && hasLossyNumbers(parsed.value) ? (
        <div class="error" data-testid="new-doc-json-lossy">
          An integer here is beyond 2^53: this page reads it as a double, so it would be stored rounded. Write it as a string, or
          create the document through the API.
        </div>
      ) : null}
      <ErrorBox error={error} testid="new-doc-error" />
      <div class="row">
        <button type="submit" class="primary" data-testid="new-doc-submit" disabled={busy || !!parsed.error}>
          {busy ? 'Creating…' : 'Create'}
        </button>
        <button type="button" data-testid="new-doc-cancel" onClick={onClose}>
          Cancel
        </button>
      </div>
    </form>
  );
}

export default function CollectionView({ db, path }) {
  // The order is in the route (?order=), so Back from a document keeps it.
  const wanted = route.value.params.get('order') || '';
  const order = ORDERS.some(([v]) => v === wanted) ? wanted : '';
  const setOrder = (v) => {
    location.hash = dataHref(db, path, { order: v });
  };
  const [creating, setCreating] = useState(false);
  const list = usePaged(
    async (after) => {
      const qs = new URLSearchParams({ limit: String(PAGE) });
      if (order) qs.set('orderBy', order);
      if (after) qs.set('startAfter', after);
      const page = pageOf(await api.get(`${docURL(db, path)}?${qs}`));
      return { items: page.docs, next: page.nextCursor };
    },
    [db, path, order, dataChanged.value],
  );
  const system = isSystem(path);
  return (
    <div data-testid="collection-view">
      <div class="row spread">
        <label class="inline">
          Order
          <select data-testid="docs-order" value={order} onChange={(e) => setOrder(e.currentTarget.value)}>
            {ORDERS.map(([v, t]) => (
              <option key={v} value={v}>
                {t}
              </option>
            ))}
          </select>
        </label>
        <span class="muted small" data-testid="docs-count">
          {list.items.length} shown{list.next ? ', more available' : ''}
        </span>
        {system ? (
          <span class="muted small">System collection: read only.</span>
        ) : (
          <button class="primary" data-testid="new-doc" onClick={() => setCreating(true)} disabled={creating}>
            New document
          </button>
        )}
      </div>
      {creating && !system ? <NewDocument db={db} collection={path} onClose={() => setCreating(false)} /> : null}
      <ErrorBox error={list.error} testid="docs-error" />
      {list.loading && !list.items.length ? <p class="muted">Loading…</p> : null}
      {!list.loading || list.items.length ? <DocTable db={db} docs={list.items} testid="docs-table" rowTestid="doc-row" /> : null}
      <More cursor={list.next} loading={list.loading} onMore={list.more} testid="docs-more" />
    </div>
  );
}
