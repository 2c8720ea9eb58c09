// Health: numbers from GET /metrics (Prometheus text, parsed in the page so
// it shows exactly what a Prometheus server would scrape), every 5 s while
// the page is visible. Rates come from the difference between two scrapes,
// so the first scrape shows totals and "measuring…".
import { useEffect, useRef, useState } from 'preact/hooks';
import { api } from '../api.js';
import { ErrorBox, Header, Badge, Time, useEvery } from '../ui.jsx';
import { parseMetrics, sum, sumBy, buckets, bucketDelta, quantileBound } from '../metrics.js';

const INTERVAL = 5000;

async function scrape() {
  const [m, ready] = await Promise.all([
    api.get('/metrics').then((r) => parseMetrics(typeof r.body === 'string' ? r.body : '')),
    // /ready is anonymous and answers 503 with an error body when not ready.
    api.get('/ready').then(
      () => ({ ok: true, message: 'ready' }),
      (e) => ({ ok: false, message: e.message }),
    ),
  ]);
  return { at: Date.now(), m, ready };
}

/** Scrapes now and every INTERVAL while the document is visible. */
function useScrapes() {
  const [state, setState] = useState({ now: null, before: null, error: null });
  const alive = useRef(true);
  const busy = useRef(false); // one scrape at a time, whatever woke us
  async function tick() {
    if (document.hidden || busy.current) return;
    busy.current = true;
    try {
      const s = await scrape();
      if (alive.current) setState((old) => ({ now: s, before: old.now, error: null }));
    } catch (error) {
      if (alive.current) setState((old) => ({ ...old, error }));
    } finally {
      busy.current = false;
    }
  }
  useEffect(() => {
    alive.current = true;
    tick();
    return () => {
      alive.current = false;
    };
  }, []);
  // Hidden: stop; visible again: scrape at once (the rate then spans the
  // pause, which is still a true average over it).
  useEvery(tick, INTERVAL);
  return state;
}

const fmt = (n, digits = 2) =>
  n === null || n === undefined || Number.isNaN(n) ? '—' : Number.isInteger(n) ? n.toLocaleString() : n.toFixed(digits);

/** Per-second rate of a counter between two scrapes; null on the first or after a reset. */
function rate(now, before, name, want) {
  if (!before) return null;
  const a = sum(now.m, name, want);
  const b = sum(before.m, name, want) ?? 0;
  const dt = (now.at - before.at) / 1000;
  if (a === null || a < b || dt <= 0) return null;
  return (a - b) / dt;
}

/**
 * Mean of a histogram between two scrapes when it had observations since,
 * else since the server started: {value, window}.
 */
function mean(now, before, base) {
  const c = sum(now.m, `${base}_count`);
  const s = sum(now.m, `${base}_sum`);
  if (c === null || s === null || c <= 0) return { value: null, window: 'no observations yet' };
  const c0 = before ? sum(before.m, `${base}_count`) : null;
  const s0 = before ? sum(before.m, `${base}_sum`) : null;
  if (c0 !== null && s0 !== null && c > c0) return { value: (s - s0) / (c - c0), window: 'last scrape interval' };
  return { value: s / c, window: 'since start' };
}

function Stat({ id, label, value, sub }) {
  return (
    <div class="stat" data-testid={`health-${id}`}>
      <div class="label">{label}</div>
      <div class="value" data-testid={`health-${id}-value`}>
        {value}
      </div>
      {sub ? <div class="small muted">{sub}</div> : null}
    </div>
  );
}

export default function Health() {
  const { now, before, error } = useScrapes();
  if (!now) {
    return (
      <>
        <Header title="Health" />
        {error ? <ErrorBox error={error} /> : <p class="muted">Scraping /metrics…</p>}
      </>
    );
  }
  const m = now.m;
  const engine = m.has('loom_mongo_commit_seconds_count') ? 'mongo' : 'sqlite';
  const commit = `loom_${engine}_commit_seconds`;
  const batch = `loom_${engine}_commit_batch_requests`;
  const measuring = <span class="muted">measuring…</span>;
  const perSec = (v) => (v === null ? measuring : `${fmt(v)}/s`);

  const commitsPerSec = rate(now, before, `${commit}_count`);
  const commitMs = mean(now, before, commit);
  const batchMean = mean(now, before, batch);
  // Quantiles over the same window as the mean.
  const bs = batchMean.window === 'last scrape interval' ? bucketDelta(buckets(m, batch), buckets(before.m, batch)) : buckets(m, batch);
  const bound = (q) => {
    const b = quantileBound(q, bs);
    return b === null ? '—' : b === Infinity ? `> ${fmt(bs[bs.length - 2]?.le)}` : `≤ ${fmt(b)}`;
  };
  const outcomes = sumBy(m, 'loom_webhook_attempts_total', 'outcome');
  const conns = sumBy(m, 'loom_realtime_connections', 'transport');
  const connTotal = Object.values(conns).reduce((a, b) => a + b, 0);

  return (
    <>
      <Header title="Health">
        <Badge status={now.ready.ok ? 'ok' : 'error'} testid="health-ready" />
        <span class="small muted">
          {now.ready.ok ? '/ready: ready' : `/ready: ${now.ready.message}`} · scraped <Time value={now.at} /> every 5 s
        </span>
      </Header>
      <ErrorBox error={error} />
      {!before ? <p class="notice">First scrape: totals since the server started; rates appear with the next scrape.</p> : null}
      <h3>Storage ({engine})</h3>
      <div class="grid">
        <Stat id="commits" label="Commits per second" value={perSec(commitsPerSec)} sub={`${fmt(sum(m, `${commit}_count`))} commits since start`} />
        <Stat
          id="commit-latency"
          label="Mean commit latency"
          value={commitMs.value === null ? '—' : `${fmt(commitMs.value * 1000)} ms`}
          sub={commitMs.window}
        />
        <Stat
          id="batch"
          label="Requests per commit (mean)"
          value={fmt(batchMean.value)}
          sub={`p50 ${bound(0.5)}, p95 ${bound(0.95)} (${batchMean.window})`}
        />
        <Stat id="head-seq" label="Change-log head seq" value={fmt(sum(m, 'loom_changefeed_head_seq'))} />
      </div>
      <h3>Triggers and deliveries</h3>
      <div class="grid">
        <Stat
          id="lag"
          label="Evaluator lag"
          value={`${fmt(sum(m, 'loom_trigger_evaluator_lag_seconds'), 3)} s`}
          sub={`${fmt(sum(m, 'loom_trigger_evaluator_lag_changes'))} changes not yet evaluated`}
        />
        <Stat
          id="outbox"
          label="Outbox pending"
          value={fmt(sum(m, 'loom_webhook_outbox_pending'))}
          sub={`${fmt(sum(m, 'loom_webhook_outbox_scheduled'))} scheduled · ${fmt(sum(m, 'loom_webhook_deliveries_held'))} held by this node`}
        />
        {['delivered', 'failed', 'dead'].map((o) => (
          <Stat
            key={o}
            id={`attempts-${o}`}
            label={`Attempts ${o}`}
            value={fmt(outcomes[o] ?? 0)}
            sub={before ? `${fmt(rate(now, before, 'loom_webhook_attempts_total', { outcome: o }) ?? 0)}/s` : 'since start'}
          />
        ))}
      </div>
      <h3>Realtime and HTTP</h3>
      <div class="grid">
        <Stat
          id="connections"
          label="Realtime connections"
          value={fmt(connTotal)}
          sub={`ws ${fmt(conns.ws ?? 0)} · sse ${fmt(conns.sse ?? 0)}`}
        />
        <Stat id="subscriptions" label="Realtime subscriptions" value={fmt(sum(m, 'loom_realtime_subscriptions') ?? 0)} />
        <Stat
          id="http"
          label="HTTP requests per second"
          value={perSec(rate(now, before, 'loom_http_requests_total'))}
          sub={`${fmt(sum(m, 'loom_http_requests_total'))} since start (this page's scrapes included)`}
        />
      </div>
    </>
  );
}
