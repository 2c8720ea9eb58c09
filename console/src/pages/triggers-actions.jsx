// A trigger's operations, the same in the list and in the detail view:
// enable, disable, rotate the secret (shown once), delete (registered ones
// only; file triggers are read-only) with an inline confirmation.
import { useState } from 'preact/hooks';
import { api } from '../api.js';
import { ErrorBox, useAction } from '../ui.jsx';
import { TRIGGERS, triggerAction } from './triggers-shared.jsx';

export function TriggerActions({ t, onChange, onDeleted }) {
  const { busy, error, run } = useAction();
  const [confirm, setConfirm] = useState(false);

  const act = (action) => run(async () => onChange(await triggerAction(t.triggerId, action)));
  const remove = () =>
    run(async () => {
      await api.del(`${TRIGGERS}/${encodeURIComponent(t.triggerId)}`);
      setConfirm(false);
      onDeleted(t.triggerId);
    });

  return (
    <div class="trigger-actions">
      <div class="row">
        {t.status === 'enabled' ? (
          <button data-testid="trigger-disable" disabled={busy} onClick={() => act('disable')}>
            Disable
          </button>
        ) : (
          <button data-testid="trigger-enable" disabled={busy} onClick={() => act('enable')}>
            Enable
          </button>
        )}
        <button data-testid="trigger-rotate" disabled={busy} onClick={() => act('rotate-secret')} title="A new signing secret; the old one keeps signing for 24 h">
          Rotate secret
        </button>
        {t.source === 'api' && !confirm ? (
          <button class="danger" data-testid="trigger-delete" disabled={busy} onClick={() => setConfirm(true)}>
            Delete
          </button>
        ) : null}
      </div>
      {confirm ? (
        <div class="row trigger-confirm">
          <span>Delete {t.triggerId}? Its pending deliveries go dead when they fall due.</span>
          <button class="danger" data-testid="trigger-delete-confirm" disabled={busy} onClick={remove}>
            Delete
          </button>
          <button data-testid="trigger-delete-cancel" onClick={() => setConfirm(false)}>
            Keep
          </button>
        </div>
      ) : null}
      <ErrorBox error={error} testid="trigger-action-error" />
    </div>
  );
}
