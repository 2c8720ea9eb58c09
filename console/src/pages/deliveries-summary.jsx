// Dead letters at a glance: how many deliveries are dead now (the log's
// dead rows, kept 7 days, until replayed) and ever (each trigger's
// counts.dead), with a one-click filter for each.
import { useEffect, useRef, useState } from 'preact/hooks';
import { api } from '../api.js';
import { DELIVERIES } from './triggers-shared.jsx';

// Counting reads at most this many dead rows: beyond it the strip says "N+".
const COUNT_LIMIT = 100;

export function DeadSummary({ triggers, tick, current, onFilter }) {
  const [dead, setDead] = useState(null); // {rows, more}
  const inFlight = useRef(false);

  useEffect(() => {
    if (inFlight.current) return;
    inFlight.current = true;
    api
      .get(`${DELIVERIES}?status=dead&limit=${COUNT_LIMIT}`)
      .then(
        (res) => setDead({ rows: res.body.deliveries || [], more: !!res.body.nextCursor }),
        () => setDead(null),
      )
      .finally(() => {
        inFlight.current = false;
      });
  }, [tick]);

  const now = new Map();
  for (const d of dead?.rows || []) now.set(d.triggerId, (now.get(d.triggerId) || 0) + 1);
  const lifetime = triggers.reduce((n, t) => n + (t.counts?.dead || 0), 0);
  const withDead = triggers.filter((t) => (t.counts?.dead || 0) > 0 || now.has(t.triggerId));
  const active = current.status === 'dead' && !current.triggerId;
  const deadNow = dead ? `${dead.rows.length}${dead.more ? '+' : ''}` : '…';

  return (
    <div class="dead-summary" data-testid="deliveries-dead-summary">
      <button class={`stat dead-stat${active ? ' active' : ''}${dead?.rows.length ? ' bad' : ''}`} data-testid="deliveries-dead-filter" onClick={() => onFilter('', 'dead')} title="Show the dead deliveries">
        <div class="label">Dead now</div>
        <div class="value" data-testid="deliveries-dead-count">
          {deadNow}
        </div>
      </button>
      <div class="stat">
        <div class="label">Dead ever (all triggers)</div>
        <div class="value" data-testid="deliveries-dead-lifetime">
          {lifetime}
        </div>
      </div>
      <div class="dead-triggers">
        {withDead.length === 0 ? (
          <span class="muted small">No trigger has a dead delivery.</span>
        ) : (
          withDead.map((t) => (
            <button
              key={t.triggerId}
              class={`chip${current.triggerId === t.triggerId && current.status === 'dead' ? ' active' : ''}`}
              data-testid="deliveries-dead-trigger"
              data-id={t.triggerId}
              onClick={() => onFilter(t.triggerId, 'dead')}
            >
              <span class="mono">{t.triggerId}</span> · {now.get(t.triggerId) || 0} now · {t.counts?.dead || 0} ever
            </button>
          ))
        )}
      </div>
    </div>
  );
}
