// The Query page (#/query/<db>?collection=<pattern>): a query built from
// rows of filters and orderings, run through POST …/query and paged with
// its nextCursor. A collection given in the route runs at once (the Data
// page's collection groups link here).
import { useEffect, useRef, useState } from 'preact/hooks';
import { api, pageOf, queryURL } from '../api.js';
import { href, navigate } from '../router.js';
import { ErrorBox, Header, More, parseJSONOr, useAsync } from '../ui.jsx';
import { DocTable } from './data-util.jsx';

const OPS = ['==', '!=', '<', '<=', '>', '>=', 'in', 'not-in', 'array-contains', 'array-contains-any', 'prefix'];

function kindOf(v) {
  if (v === null) return 'null';
  if (Array.isArray(v)) return 'array';
  return typeof v;
}

/** The request body of the form's query (empty rows left out; a filter value is JSON when it parses, else the text as a string). */
function buildBody({ collection, filters, orders, limit, showDeleted }) {
  const body = { collection: collection.trim() };
  const fs = filters.filter((f) => f.field.trim());
  if (fs.length) body.filters = fs.map((f) => ({ field: f.field.trim(), op: f.op, value: parseJSONOr(f.value) }));
  const os = orders.filter((o) => o.field.trim());
  if (os.length) body.orderBy = os.map((o) => ({ field: o.field.trim(), direction: o.direction }));
  if (String(limit).trim()) body.limit = Number(limit);
  if (showDeleted) body.showDeleted = true;
  return body;
}

/**
 * The rest of the form (filters, orderings, limit, deleted) as the route's
 * `q` parameter, so Back from a result (or a reload) brings the same query
 * back; the collection has its own parameter. Anything odd in it is dropped.
 */
const DEFAULTS = { filters: [], orders: [], limit: '50', showDeleted: false };

function formOfParam(text) {
  let q;
  try {
    q = JSON.parse(text || 'null');
  } catch {
    return DEFAULTS;
  }
  if (!q || typeof q !== 'object') return DEFAULTS;
  const rows = (v) => (Array.isArray(v) ? v.filter((r) => r && typeof r === 'object') : []);
  return {
    filters: rows(q.filters).map((f) => ({ field: String(f.field ?? ''), op: OPS.includes(f.op) ? f.op : '==', value: String(f.value ?? '') })),
    orders: rows(q.orders).map((o) => ({ field: String(o.field ?? ''), direction: o.direction === 'desc' ? 'desc' : 'asc' })),
    limit: q.limit === undefined ? DEFAULTS.limit : String(q.limit),
    showDeleted: q.showDeleted === true,
  };
}

function paramOfForm({ filters, orders, limit, showDeleted }) {
  if (!filters.length && !orders.length && String(limit) === DEFAULTS.limit && !showDeleted) return undefined;
  return JSON.stringify({ filters, orders, limit, showDeleted });
}

// Single-quoted for a POSIX shell: a ' inside ends the quote, adds \' and reopens.
const sq = (s) => `'${String(s).replaceAll("'", "'\\''")}'`;

/**
 * The same query as a shell command (the token is left as a variable). The
 * URL is quoted like the body: encodeURIComponent leaves ' in a database
 * name taken from the route.
 */
function curlOf(db, body) {
  return `curl -s -X POST ${sq(location.origin + queryURL(db))} \\\n  -H "Authorization: Bearer $TOKEN" -H 'Content-Type: application/json' \\\n  -d ${sq(JSON.stringify(body))}`;
}

/** Edits rows of a list: update(i, patch), remove(i), add(). */
function rowsOf(rows, setRows, blank) {
  return {
    update: (i, patch) => setRows(rows.map((r, j) => (j === i ? { ...r, ...patch } : r))),
    remove: (i) => setRows(rows.filter((_, j) => j !== i)),
    add: () => setRows([...rows, { ...blank }]),
  };
}

function FilterRows({ filters, setFilters }) {
  const r = rowsOf(filters, setFilters, { field: '', op: '==', value: '' });
  return (
    <fieldset class="rows">
      <legend>Filters</legend>
      {filters.map((f, i) => (
        <div class="row" key={i}>
          <input placeholder="field" value={f.field} data-testid={`filter-field-${i}`} onInput={(e) => r.update(i, { field: e.currentTarget.value })} />
          <select value={f.op} data-testid={`filter-op-${i}`} onChange={(e) => r.update(i, { op: e.currentTarget.value })}>
            {OPS.map((op) => (
              <option key={op}>{op}</option>
            ))}
          </select>
          <input class="mono" placeholder='value: JSON, or text' value={f.value} data-testid={`filter-value-${i}`} onInput={(e) => r.update(i, { value: e.currentTarget.value })} />
          <span class="muted small" data-testid={`filter-kind-${i}`} title="How the value is sent">
            {kindOf(parseJSONOr(f.value))}
          </span>
          <button type="button" class="link" data-testid={`filter-remove-${i}`} onClick={() => r.remove(i)}>
            remove
          </button>
        </div>
      ))}
      <button type="button" data-testid="filter-add" onClick={r.add}>
        + Filter
      </button>
    </fieldset>
  );
}

function OrderRows({ orders, setOrders }) {
  const r = rowsOf(orders, setOrders, { field: '', direction: 'asc' });
  return (
    <fieldset class="rows">
      <legend>Order by</legend>
      {orders.map((o, i) => (
        <div class="row" key={i}>
          <input placeholder="field" value={o.field} data-testid={`order-field-${i}`} onInput={(e) => r.update(i, { field: e.currentTarget.value })} />
          <select value={o.direction} data-testid={`order-dir-${i}`} onChange={(e) => r.update(i, { direction: e.currentTarget.value })}>
            <option value="asc">asc</option>
            <option value="desc">desc</option>
          </select>
          <button type="button" class="link" data-testid={`order-remove-${i}`} onClick={() => r.remove(i)}>
            remove
          </button>
        </div>
      ))}
      <button type="button" data-testid="order-add" onClick={r.add}>
        + Order
      </button>
    </fieldset>
  );
}

export default function Query({ parts, params }) {
  const routeDb = parts[0] || 'default';
  const routeCollection = params.get('collection') || '';
  const [db, setDb] = useState(routeDb);
  const [collection, setCollection] = useState(routeCollection);
  const [saved] = useState(() => formOfParam(params.get('q')));
  const [filters, setFilters] = useState(saved.filters);
  const [orders, setOrders] = useState(saved.orders);
  const [limit, setLimit] = useState(saved.limit);
  const [showDeleted, setShowDeleted] = useState(saved.showDeleted);
  // ran: the query as sent ({db, body}) with its results so far.
  const [ran, setRan] = useState(null);
  const [error, setError] = useState(null);
  const [loading, setLoading] = useState(false);
  const dbs = useAsync(async () => (await api.get('/admin/v1/databases?limit=1000')).body.databases, []);

  // An answer for a query run before the latest one is dropped.
  const gen = useRef(0);
  async function fetchPage(target, body, prev) {
    const g = ++gen.current;
    setLoading(true);
    setError(null);
    try {
      const send = prev ? { ...body, startAfter: prev.next } : body;
      const res = await api.post(queryURL(target), send);
      if (g !== gen.current) return;
      const { docs, nextCursor } = pageOf(res);
      setRan({ db: target, body, docs: prev ? [...prev.docs, ...docs] : docs, next: nextCursor });
    } catch (err) {
      if (g !== gen.current) return;
      setError(err);
      if (!prev) setRan(null);
    } finally {
      if (g === gen.current) setLoading(false);
    }
  }

  const run = (target = db, form = { collection, filters, orders, limit, showDeleted }) => {
    // Written without a hashchange: the page stays as it is, and Back from a
    // result returns to this query.
    history.replaceState(history.state, '', href('query', target, { collection: form.collection.trim(), q: paramOfForm(form) }));
    return fetchPage(target, buildBody(form), null);
  };

  // A route with a collection (a link from the tree) fills the form and runs.
  useEffect(() => {
    setDb(routeDb);
    if (routeCollection) {
      setCollection(routeCollection);
      run(routeDb, { collection: routeCollection, filters, orders, limit, showDeleted });
    }
  }, [routeDb, routeCollection]);

  const body = buildBody({ collection, filters, orders, limit, showDeleted });
  const dbNames = dbs.data ? (dbs.data.includes(db) ? dbs.data : [db, ...dbs.data]) : [db];
  return (
    <>
      <Header title="Query" />
      <form
        class="panel query-form"
        data-testid="query-form"
        onSubmit={(e) => {
          e.preventDefault();
          run();
        }}
      >
        <div class="row">
          <label>
            Database
            <select data-testid="query-db" value={db} onChange={(e) => (setDb(e.currentTarget.value), navigate('query', e.currentTarget.value))}>
              {dbNames.map((n) => (
                <option key={n}>{n}</option>
              ))}
            </select>
          </label>
          <label class="grow">
            Collection or pattern (* = one segment)
            <input class="mono" data-testid="query-collection" placeholder="rooms/*/messages" value={collection} onInput={(e) => setCollection(e.currentTarget.value)} required />
          </label>
          <label>
            Limit
            <input type="number" min="1" max="1000" data-testid="query-limit" value={limit} onInput={(e) => setLimit(e.currentTarget.value)} class="narrow" />
          </label>
          <label class="check">
            <input type="checkbox" data-testid="query-show-deleted" checked={showDeleted} onChange={(e) => setShowDeleted(e.currentTarget.checked)} />
            Show deleted
          </label>
        </div>
        <FilterRows filters={filters} setFilters={setFilters} />
        <OrderRows orders={orders} setOrders={setOrders} />
        <div class="row">
          <button type="submit" class="primary" data-testid="query-run" disabled={loading}>
            {loading ? 'Running…' : 'Run'}
          </button>
        </div>
        <details data-testid="query-curl">
          <summary data-testid="query-curl-toggle">As curl / JSON</summary>
          <pre class="json" data-testid="query-curl-text">
            {curlOf(db, body)}
          </pre>
        </details>
      </form>
      <ErrorBox error={error} testid="query-error" />
      {ran ? (
        <div data-testid="query-results">
          <p class="muted small" data-testid="query-count">
            {ran.docs.length} document{ran.docs.length === 1 ? '' : 's'}
            {ran.next ? ', more available' : ''}
          </p>
          <DocTable db={ran.db} docs={ran.docs} showPath testid="query-table" rowTestid="query-row" />
          <More cursor={ran.next} loading={loading} onMore={() => fetchPage(ran.db, ran.body, ran)} testid="query-more" />
        </div>
      ) : null}
    </>
  );
}
