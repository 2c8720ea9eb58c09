// Live: a tail of the change log through the realtime API clients use
// (ws.js). A subscription covers one collection pattern of fixed depth
// (`*` is one segment), so "everything" is several patterns at once; their
// events are merged here, newest first, each labelled with its pattern.
import { useEffect, useRef, useState } from 'preact/hooks';
import { subscribe } from '../ws.js';
import { Badge, ErrorBox, Header, Json } from '../ui.jsx';
import { dataHref, preview } from './data-util.jsx';

// The table keeps the newest MAX events: a busy database must not grow the
// page without bound.
const MAX = 500;

const PRESETS = [
  { id: 'top', label: 'Top level', patterns: ['*'] },
  { id: '3', label: 'Depth 3', patterns: ['*/*/*'] },
  { id: '5', label: 'Depth 5', patterns: ['*/*/*/*/*'] },
  { id: 'all', label: 'Depths 1–7', patterns: ['*', '*/*/*', '*/*/*/*/*', '*/*/*/*/*/*/*'] },
];

/** The patterns of the input: separated by commas or white space. */
function patternsOf(text) {
  return [...new Set(text.split(/[\s,]+/).map((p) => p.replace(/^\/+|\/+$/g, '')).filter(Boolean))];
}

/** The filters textarea: empty, or a JSON array of {field, op, value}. */
function filtersOf(text) {
  if (!text.trim()) return null;
  let v;
  try {
    v = JSON.parse(text);
  } catch (e) {
    throw new Error(`Filters are not JSON: ${e.message}`);
  }
  if (!Array.isArray(v)) throw new Error('Filters must be a JSON array, e.g. [{"field":"done","op":"==","value":false}].');
  return v;
}

let seq = 0;

export default function Live() {
  const [db, setDb] = useState('default');
  const [patternText, setPatternText] = useState('*');
  const [filterText, setFilterText] = useState('');
  const [running, setRunning] = useState(null); // {db, patterns} while subscribed
  const [status, setStatus] = useState({}); // pattern → connecting | live | reconnecting | ended
  const [errors, setErrors] = useState([]); // [{pattern, code, message}]
  const [events, setEvents] = useState([]);
  const [total, setTotal] = useState(0);
  const [paused, setPaused] = useState(false);
  const [formError, setFormError] = useState(null);
  const subs = useRef(new Map()); // pattern → unsubscriber
  const held = useRef([]); // events that arrived while paused
  const pausedRef = useRef(false);

  function stopAll() {
    for (const off of subs.current.values()) off();
    subs.current.clear();
  }
  useEffect(() => stopAll, []);

  function add(row) {
    setTotal((n) => n + 1);
    if (pausedRef.current) {
      held.current.unshift(row);
      held.current.length = Math.min(held.current.length, MAX);
      return;
    }
    setEvents((list) => [row, ...list].slice(0, MAX));
  }

  function end(pattern, state) {
    subs.current.get(pattern)?.();
    subs.current.delete(pattern);
    setStatus((s) => ({ ...s, [pattern]: state }));
  }

  function onMessage(pattern, msg) {
    const p = msg.payload || {};
    if (msg.type === 'event' && p.delta) {
      add({ key: ++seq, pattern, ...p.delta });
    } else if (msg.type === 'error') {
      // The server ended this subscription (a bad pattern or filter, no
      // rule opening it): drop it so a reconnect does not repeat it.
      // Under [compat] syntrix the code is renamed; Loom's own is in details.code.
      setErrors((e) => [...e, { pattern, code: p.details?.code || p.code || '', message: p.message || 'error' }]);
      end(pattern, 'ended');
    } else if (msg.type === 'reset') {
      setErrors((e) => [...e, { pattern, code: 'RESET', message: `${p.reason || 'The stream was reset.'} Press Start again.` }]);
      end(pattern, 'ended');
    }
  }

  function start(e) {
    e?.preventDefault();
    setFormError(null);
    const patterns = patternsOf(patternText);
    let filters;
    try {
      if (!db.trim()) throw new Error('Name a database.');
      if (patterns.length === 0) throw new Error('Name at least one collection pattern.');
      filters = filtersOf(filterText);
    } catch (err) {
      setFormError(err);
      return;
    }
    stopAll();
    setErrors([]);
    setStatus(Object.fromEntries(patterns.map((p) => [p, 'connecting'])));
    for (const pattern of patterns) {
      const query = { collection: pattern };
      if (filters) query.filters = filters;
      const off = subscribe(
        { database: db.trim(), query, sendSnapshot: false },
        (msg) => onMessage(pattern, msg),
        (st) => setStatus((s) => (s[pattern] === 'ended' ? s : { ...s, [pattern]: st })),
      );
      subs.current.set(pattern, off);
    }
    setRunning({ db: db.trim(), patterns });
  }

  function stop() {
    stopAll();
    setRunning(null);
    setStatus({});
    resume();
  }

  function pause() {
    pausedRef.current = true;
    setPaused(true);
  }

  function resume() {
    pausedRef.current = false;
    setPaused(false);
    const h = held.current;
    held.current = [];
    if (h.length) setEvents((list) => [...h, ...list].slice(0, MAX));
  }

  function clear() {
    held.current = [];
    setEvents([]);
    setTotal(0);
  }

  function preset(p) {
    setPatternText(p.patterns.join(', '));
  }

  return (
    <div class="live">
      <Header title="Live">
        <OverallStatus running={running} status={status} paused={paused} />
      </Header>
      <form class="panel live-form" data-testid="live-form" onSubmit={start}>
        <div class="row">
          <label>
            Database
            <input data-testid="live-db" value={db} onInput={(e) => setDb(e.currentTarget.value)} size="12" />
          </label>
          <label class="live-pattern">
            <span>
              Collection patterns (comma-separated; <code>*</code> is one segment)
            </span>
            <input data-testid="live-pattern" value={patternText} onInput={(e) => setPatternText(e.currentTarget.value)} placeholder="rooms/*/messages" />
          </label>
        </div>
        <div class="row live-presets">
          <span class="muted small">Presets:</span>
          {PRESETS.map((p) => (
            <button type="button" key={p.id} data-testid={`live-preset-${p.id}`} onClick={() => preset(p)} title={p.patterns.join(', ')}>
              {p.label}
            </button>
          ))}
        </div>
        <label>
          Filters (optional JSON array, applied to every pattern)
          <textarea data-testid="live-filters" rows="2" value={filterText} onInput={(e) => setFilterText(e.currentTarget.value)} placeholder='[{"field":"done","op":"==","value":false}]' />
        </label>
        <ErrorBox error={formError} testid="live-form-error" />
        <div class="row">
          <button type="submit" class="primary" data-testid="live-start">
            {running ? 'Restart' : 'Start'}
          </button>
          <button type="button" data-testid="live-stop" disabled={!running} onClick={stop}>
            Stop
          </button>
          {paused ? (
            <button type="button" data-testid="live-resume" onClick={resume}>
              Resume ({held.current.length} held)
            </button>
          ) : (
            <button type="button" data-testid="live-pause" disabled={!running} onClick={pause}>
              Pause
            </button>
          )}
          <button type="button" data-testid="live-clear" onClick={clear}>
            Clear
          </button>
        </div>
      </form>
      {errors.map((e, i) => (
        <div class="error" data-testid="live-error" role="alert" key={i}>
          <b>{e.code}</b> <code>{e.pattern}</code>: {e.message}
        </div>
      ))}
      <p class="muted small" data-testid="live-count">
        {total} event{total === 1 ? '' : 's'} received; the newest {MAX} are kept, newest first. The tail starts now: past changes are not shown.
      </p>
      <EventTable events={events} db={running?.db || db} showPattern={(running?.patterns.length || 0) > 1} />
    </div>
  );
}

function OverallStatus({ running, status, paused }) {
  if (!running) return <Badge status="stopped" testid="live-status" />;
  const states = Object.values(status);
  let s = 'live';
  if (states.includes('reconnecting')) s = 'reconnecting';
  else if (states.includes('connecting')) s = 'connecting';
  else if (states.every((x) => x === 'ended')) s = 'ended';
  return (
    <span class="row">
      <Badge status={s} testid="live-status" />
      {paused ? <Badge status="paused" testid="live-paused" /> : null}
      <span class="muted small">
        {running.db}: {running.patterns.join(', ')}
      </span>
    </span>
  );
}

function EventTable({ events, db, showPattern }) {
  if (events.length === 0) return <p class="muted" data-testid="live-empty">No events yet.</p>;
  return (
    <table data-testid="live-events">
      <thead>
        <tr>
          <th>Time</th>
          <th>Op</th>
          <th title="What this change did to the subscription's results (with filters, an update can enter or leave them)">Effect</th>
          <th>Path</th>
          <th>Version</th>
          <th>Document</th>
          {showPattern ? <th>Pattern</th> : null}
        </tr>
      </thead>
      <tbody>
        {events.map((ev) => (
          <EventRow key={ev.key} ev={ev} db={db} showPattern={showPattern} />
        ))}
      </tbody>
    </table>
  );
}

// The time of day of a change (the date is in the tooltip): a tail is read
// as it happens.
function Clock({ ms }) {
  const d = new Date(Number(ms));
  if (!ms || Number.isNaN(d.getTime())) return <td class="muted">—</td>;
  return (
    <td class="nowrap mono small" title={d.toISOString()}>
      {[d.getHours(), d.getMinutes(), d.getSeconds()].map((n) => String(n).padStart(2, '0')).join(':')}.{String(d.getMilliseconds()).padStart(3, '0')}
    </td>
  );
}

function EventRow({ ev, db, showPattern }) {
  const [open, setOpen] = useState(false);
  const doc = ev.document || ev.before;
  return (
    <tr data-testid="live-row" data-path={ev.path} data-op={ev.op}>
      <Clock ms={ev.timestamp} />
      <td data-testid="live-row-op">
        <Badge status={ev.op} />
      </td>
      <td class="muted">{ev.type}</td>
      <td>
        <a class="mono" data-testid="live-row-path" href={dataHref(db, String(ev.path))}>
          {ev.path}
        </a>
      </td>
      <td class="mono">{doc?.version ?? '—'}</td>
      <td class="live-doc">
        {doc ? (
          open ? (
            <div>
              <button class="link" data-testid="live-row-collapse" onClick={() => setOpen(false)}>
                Collapse
              </button>
              <Json value={ev.document ? { document: ev.document, before: ev.before } : { before: ev.before }} />
            </div>
          ) : (
            <button class="link mono preview" data-testid="live-row-expand" title="Show the whole document" onClick={() => setOpen(true)}>
              {preview(doc, 121)}
            </button>
          )
        ) : (
          <span class="muted">—</span>
        )}
      </td>
      {showPattern ? <td class="mono muted small">{ev.pattern}</td> : null}
    </tr>
  );
}
