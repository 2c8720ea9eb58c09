// One trigger (#/triggers/<id>): its definition as the API returns it
// (never its secret), its counters and last error, the operations, and a
// way into its delivery log.
import { href, navigate } from '../router.js';
import { ErrorBox, Header, Json, Time, usePoll } from '../ui.jsx';
import { TriggerActions } from './triggers-actions.jsx';
import { Counts, LastError, TriggerStatus, getTrigger } from './triggers-shared.jsx';

// The definition's fields, without the state the list shows separately.
function definitionOf(t) {
  const { source, status, disabledReason, counts, lastError, lastErrorAt, secretRotatingUntil, fileError, ...def } = t;
  return def;
}

export function TriggerDetail({ id }) {
  const { data: t, setData: setT, error } = usePoll(() => getTrigger(id), 4000, [id]);

  return (
    <div class="trigger-detail" data-testid="trigger-detail">
      <Header title={`Trigger ${id}`}>
        <a href={href('triggers')} data-testid="trigger-back">
          ← All triggers
        </a>
      </Header>
      <ErrorBox error={error} testid="trigger-error" />
      {t ? (
        <div class="cols">
          <div class="grow">
            <div class="panel">
              <h3>Definition</h3>
              <Json value={definitionOf(t)} testid="trigger-definition" />
            </div>
          </div>
          <div class="side trigger-side">
            <div class="panel">
              <div class="row">
                <TriggerStatus t={t} />
                <span class="muted small">source: {t.source}</span>
              </div>
              <Counts t={t} />
              <div class="row">
                <a href={href('deliveries', { triggerId: id })} data-testid="trigger-deliveries-link">
                  Deliveries
                </a>
                <a href={href('deliveries', { triggerId: id, status: 'dead' })} data-testid="trigger-dead-link">
                  Dead letters
                </a>
              </div>
            </div>
            <div class="panel">
              <h3>Last error</h3>
              <LastError t={t} />
              {t.secretRotatingUntil ? (
                <p class="small muted" data-testid="trigger-rotating">
                  The previous secret also signs until <Time value={t.secretRotatingUntil} />.
                </p>
              ) : null}
            </div>
            <div class="panel">
              <TriggerActions t={t} onChange={setT} onDeleted={() => navigate('triggers')} />
            </div>
          </div>
        </div>
      ) : error ? null : (
        <p class="muted">Loading…</p>
      )}
    </div>
  );
}
