// One delivery in the log, and (expanded) every attempt made: when, the
// receiver's HTTP status, the latency, the error and the response body,
// shown as text.
import { useState } from 'preact/hooks';
import { api } from '../api.js';
import { href } from '../router.js';
import { Badge, ErrorBox, Time, useAction } from '../ui.jsx';
import { DELIVERIES, ms } from './triggers-shared.jsx';

function AttemptStatus({ a, testid }) {
  if (!a) return <span class="muted">—</span>;
  // Status 0: no HTTP answer (a timeout, a refused connection, the SSRF guard).
  const ok = a.status >= 200 && a.status < 300;
  return (
    <span class={ok ? 'good-text' : 'bad-text'} data-testid={testid}>
      {a.status ? `HTTP ${a.status}` : 'no answer'}
    </span>
  );
}

export function DeliveryRow({ d, onChange, onRefresh }) {
  const [open, setOpen] = useState(false);
  const { busy, error, run } = useAction();
  const attempts = d.attempts || [];
  const last = attempts[attempts.length - 1];
  const cancelable = d.status === 'pending' || d.status === 'scheduled';

  const act = (action) =>
    run(async () => {
      const res = await api.post(`${DELIVERIES}/${encodeURIComponent(d.id)}/${action}`);
      onChange({ id: d.id, status: res.body.status }, action);
      onRefresh();
    });

  return (
    <>
      <tr data-testid="delivery-row" data-id={d.id} data-status={d.status} class={open ? 'selected' : ''}>
        <td>
          <button class="link" data-testid="delivery-expand" aria-expanded={open} onClick={() => setOpen(!open)} title="Attempts">
            {open ? '▾' : '▸'}
          </button>
        </td>
        <td class="mono small delivery-id" title={`event ${d.eventId}`}>
          {d.id}
        </td>
        <td>
          <a href={href('triggers', d.triggerId)} class="mono">
            {d.triggerId}
          </a>
          {d.orderingKey ? <div class="small muted ordering-key">key {d.orderingKey}</div> : null}
        </td>
        <td class="mono">{d.seq}</td>
        <td>
          <Badge status={d.status} testid="delivery-status" />
        </td>
        <td data-testid="delivery-attempts-count">{attempts.length}</td>
        <td>
          <AttemptStatus a={last} testid="delivery-last-status" />
          {last ? (
            <span class="muted small" data-testid="delivery-last-latency">
              {' '}
              {ms(last.latencyMs)}
            </span>
          ) : null}
        </td>
        <td class="small">
          <Time value={d.createdAt} />
        </td>
        <td class="small">
          <Time value={d.finishedAt || undefined} />
        </td>
        <td class="small">
          <Time value={d.status === 'scheduled' ? d.deliverAt : d.nextAttemptAt || undefined} />
        </td>
        <td>
          <div class="row">
            {d.status !== 'pending' ? (
              <button data-testid="delivery-replay" disabled={busy} onClick={() => act('replay')} title="Deliver again: same webhook-id, a fresh retry budget">
                {d.status === 'scheduled' ? 'Deliver now' : 'Replay'}
              </button>
            ) : null}
            {cancelable ? (
              <button class="danger" data-testid="delivery-cancel" disabled={busy} onClick={() => act('cancel')}>
                Cancel
              </button>
            ) : null}
          </div>
          <ErrorBox error={error} testid="delivery-action-error" />
        </td>
      </tr>
      {open ? (
        <tr class="attempts-row">
          <td />
          <td colSpan={10}>
            <Attempts d={d} />
          </td>
        </tr>
      ) : null}
    </>
  );
}

function Attempts({ d }) {
  const attempts = d.attempts || [];
  return (
    <div data-testid="delivery-attempts">
      <div class="small muted">
        Event <span class="mono">{d.eventId}</span> (the webhook-id) · change seq {d.seq}
        {d.deliverAt ? (
          <>
            {' '}
            · scheduled for <Time value={d.deliverAt} />
          </>
        ) : null}
      </div>
      {attempts.length === 0 ? (
        <p class="muted">No attempt yet.</p>
      ) : (
        <table class="attempts">
          <thead>
            <tr>
              <th>#</th>
              <th>At</th>
              <th>Status</th>
              <th>Latency</th>
              <th>Error</th>
              <th>Response</th>
            </tr>
          </thead>
          <tbody>
            {attempts.map((a, i) => (
              <tr key={i} data-testid="delivery-attempt">
                <td>{i + 1}</td>
                <td class="small">
                  <Time value={a.at} />
                </td>
                <td>
                  <AttemptStatus a={a} testid="attempt-status" />
                </td>
                <td data-testid="attempt-latency">{ms(a.latencyMs)}</td>
                <td class="bad-text" data-testid="attempt-error">
                  {a.error || ''}
                </td>
                <td>{a.response ? <pre class="response" data-testid="attempt-response">{a.response}</pre> : <span class="muted">—</span>}</td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
    </div>
  );
}
