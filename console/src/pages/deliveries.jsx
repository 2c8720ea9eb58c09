// Deliveries (#/deliveries?triggerId=&status=): the delivery log, newest
// first, with every attempt (status, latency, error, response), replay and
// cancel; and dead letters at a glance above it. The log re-reads its first
// page every few seconds while the page is visible.
import { useEffect, useRef, useState } from 'preact/hooks';
import { api } from '../api.js';
import { href, navigate } from '../router.js';
import { ErrorBox, Header, More, useEvery } from '../ui.jsx';
import { DeadSummary } from './deliveries-summary.jsx';
import { DeliveryRow } from './deliveries-row.jsx';
import { DELIVERIES, Revealed, listTriggers } from './triggers-shared.jsx';

const PAGE = 50;
const REFRESH_MS = 3000;
// With more pages loaded, a refresh adds new rows on top; past this many
// rows it starts again from the first page, so the list stays bounded.
const MAX_ROWS = 1000;
const STATUSES = ['pending', 'scheduled', 'delivered', 'dead', 'canceled'];

function logURL(triggerId, status, cursor) {
  const q = new URLSearchParams({ limit: String(PAGE) });
  if (triggerId) q.set('triggerId', triggerId);
  if (status) q.set('status', status);
  if (cursor) q.set('cursor', cursor);
  return `${DELIVERIES}?${q}`;
}

/** rows with fresh's rows replacing theirs by id and new ones on top. */
function merge(rows, fresh) {
  const byId = new Map(fresh.map((d) => [d.id, d]));
  const known = new Set(rows.map((d) => d.id));
  const added = fresh.filter((d) => !known.has(d.id));
  return [...added, ...rows.map((d) => byId.get(d.id) || d)];
}

export default function Deliveries({ params }) {
  const triggerId = params.get('triggerId') || '';
  const status = params.get('status') || '';
  const [rows, setRows] = useState(null);
  const [cursor, setCursor] = useState(null);
  const [pages, setPages] = useState(1);
  const [error, setError] = useState(null);
  const [loadingMore, setLoadingMore] = useState(false);
  const [auto, setAuto] = useState(true);
  const [triggers, setTriggers] = useState([]);
  const [tick, setTick] = useState(0); // bumps the summary's refresh
  const [notice, setNotice] = useState(null);
  const inFlight = useRef(false);
  const filterKey = `${triggerId}|${status}`;
  const key = useRef(filterKey);
  key.current = filterKey;

  async function firstPage(replace) {
    if (inFlight.current && !replace) return;
    inFlight.current = true;
    const k = filterKey;
    try {
      const res = await api.get(logURL(triggerId, status));
      if (key.current !== k) return; // the filter changed meanwhile
      const fresh = res.body.deliveries || [];
      const old = rows || [];
      const known = new Set(old.map((d) => d.id));
      // A whole page of rows not seen before may hide more between it and
      // the rows below: start again from the first page rather than show a gap.
      const gap = fresh.length >= PAGE && fresh.every((d) => !known.has(d.id));
      if (replace || pages === 1 || gap || old.length >= MAX_ROWS) {
        setRows(fresh);
        setCursor(res.body.nextCursor || null);
        setPages(1);
      } else {
        setRows((r) => merge(r || [], fresh));
      }
      setError(null);
    } catch (err) {
      if (key.current === k) setError(err);
    } finally {
      inFlight.current = false;
    }
  }

  async function more() {
    setLoadingMore(true);
    const k = filterKey;
    try {
      const res = await api.get(logURL(triggerId, status, cursor));
      if (key.current !== k) return; // the filter changed meanwhile: not these rows
      const known = new Set((rows || []).map((d) => d.id));
      setRows((r) => [...(r || []), ...(res.body.deliveries || []).filter((d) => !known.has(d.id))]);
      setCursor(res.body.nextCursor || null);
      setPages((n) => n + 1);
    } catch (err) {
      if (key.current === k) setError(err);
    } finally {
      setLoadingMore(false);
    }
  }

  async function loadTriggers() {
    try {
      setTriggers(await listTriggers());
    } catch {
      // The log still works without the trigger list (the select and the
      // summary's per-trigger counts are then empty).
    }
  }

  useEffect(() => {
    setRows(null);
    setCursor(null);
    firstPage(true);
  }, [filterKey]);
  useEffect(() => {
    loadTriggers();
  }, []);
  useEvery(
    () => {
      if (!auto) return;
      firstPage(false);
      loadTriggers();
      setTick((n) => n + 1);
    },
    REFRESH_MS,
    [auto, filterKey, pages],
  );

  const setFilter = (t, s) => navigate('deliveries', { triggerId: t, status: s });
  const refresh = () => {
    firstPage(false);
    setTick((n) => n + 1);
  };
  // A replayed or canceled row may leave a filtered log at the next
  // refresh: the notice says what became of it.
  const replaced = (d, action) => {
    setRows((r) => r.map((x) => (x.id === d.id ? { ...x, ...d } : x)));
    setNotice(`${action === 'replay' ? 'Replayed' : 'Canceled'} ${d.id}: now ${d.status}.`);
  };

  return (
    <div class="deliveries">
      <Header title="Deliveries">
        <label class="check">
          <input type="checkbox" data-testid="deliveries-auto" checked={auto} onChange={(e) => setAuto(e.currentTarget.checked)} />
          Auto-refresh
        </label>
        <button data-testid="deliveries-refresh" onClick={refresh}>
          Refresh
        </button>
      </Header>
      <DeadSummary triggers={triggers} tick={tick} current={{ triggerId, status }} onFilter={setFilter} />
      <div class="panel row filters">
        <label>
          Trigger
          <select data-testid="deliveries-trigger" value={triggerId} onChange={(e) => setFilter(e.currentTarget.value, status)}>
            <option value="">All triggers</option>
            {triggerId && !triggers.some((t) => t.triggerId === triggerId) ? <option value={triggerId}>{triggerId}</option> : null}
            {triggers.map((t) => (
              <option key={t.triggerId} value={t.triggerId}>
                {t.triggerId}
              </option>
            ))}
          </select>
        </label>
        <label>
          Status
          <select data-testid="deliveries-status" value={status} onChange={(e) => setFilter(triggerId, e.currentTarget.value)}>
            <option value="">Any status</option>
            {STATUSES.map((s) => (
              <option key={s} value={s}>
                {s}
              </option>
            ))}
          </select>
        </label>
        {triggerId || status ? (
          <a href={href('deliveries')} data-testid="deliveries-clear-filter">
            Clear filters
          </a>
        ) : null}
        {triggerId ? (
          <a href={href('triggers', triggerId)} class="small">
            Trigger {triggerId} →
          </a>
        ) : null}
      </div>
      {notice ? (
        <div class="notice" data-testid="deliveries-notice">
          {notice}
        </div>
      ) : null}
      <ErrorBox error={error} testid="deliveries-error" />
      {rows === null ? (
        <p class="muted">Loading…</p>
      ) : rows.length === 0 ? (
        <p class="muted" data-testid="deliveries-empty">
          No deliveries{status ? ` with status ${status}` : ''}{triggerId ? ` of ${triggerId}` : ''}.
        </p>
      ) : (
        // Scrolls sideways inside itself on a narrow window, not the page.
        <div class="table-scroll">
        <table data-testid="deliveries-table">
          <thead>
            <tr>
              <th />
              <th>Delivery</th>
              <th>Trigger</th>
              <th>Seq</th>
              <th>Status</th>
              <th>Attempts</th>
              <th>Last attempt</th>
              <th>Created</th>
              <th>Finished</th>
              <th>Next attempt</th>
              <th />
            </tr>
          </thead>
          <tbody>
            {rows.map((d) => (
              <DeliveryRow key={d.id} d={d} onChange={replaced} onRefresh={refresh} />
            ))}
          </tbody>
        </table>
        </div>
      )}
      <More cursor={cursor} onMore={more} loading={loadingMore} testid="deliveries-more" />
      <Revealed />
    </div>
  );
}
