// The register form: POST /admin/v1/triggers with the Trigger JSON
// (README "Triggers and webhooks"). Empty optional fields are left out so
// the server's defaults apply; its validation (a bad CEL condition, a bad
// URL) is shown as it answers.
import { useState } from 'preact/hooks';
import { api } from '../api.js';
import { ErrorBox, useAction } from '../ui.jsx';
import { TRIGGERS, takeSecret } from './triggers-shared.jsx';

const EVENTS = ['create', 'update', 'delete'];

/** The definition the form describes; throws on a field the page can check. */
function definition(f, events) {
  const s = (name) => String(f.get(name) || '').trim();
  const def = {
    triggerId: s('triggerId'),
    database: s('database') || 'default',
    collection: s('collection'),
    events,
    url: s('url'),
    enabled: f.get('enabled') === 'on',
  };
  for (const k of ['condition', 'secret', 'timeout', 'orderingKey']) if (s(k)) def[k] = s(k);
  const rp = {};
  if (s('maxAttempts')) {
    const n = Number(s('maxAttempts'));
    if (!Number.isInteger(n)) throw new Error('Max attempts must be a whole number.');
    rp.maxAttempts = n;
  }
  if (s('initialBackoff')) rp.initialBackoff = s('initialBackoff');
  if (s('maxBackoff')) rp.maxBackoff = s('maxBackoff');
  if (Object.keys(rp).length) def.retryPolicy = rp;
  if (s('headers')) {
    let h;
    try {
      h = JSON.parse(s('headers'));
    } catch (e) {
      throw new Error(`Headers are not JSON: ${e.message}`);
    }
    if (!h || typeof h !== 'object' || Array.isArray(h)) throw new Error('Headers must be a JSON object of strings.');
    def.headers = h;
  }
  return def;
}

export function TriggerForm({ onDone, onCancel }) {
  const [events, setEvents] = useState(['create', 'update', 'delete']);
  const { busy, error, run } = useAction();

  function toggle(ev, on) {
    setEvents((list) => EVENTS.filter((x) => (x === ev ? on : list.includes(x))));
  }

  function submit(e) {
    e.preventDefault();
    const form = new FormData(e.currentTarget);
    // A field the page can check throws before anything is sent; run shows it.
    run(async () => {
      const def = definition(form, events);
      const res = await api.post(TRIGGERS, def);
      takeSecret(res.body, def.secret ? 'registered' : 'generated');
      onDone(def.triggerId);
    });
  }

  return (
    <form class="panel trigger-form" data-testid="trigger-form" onSubmit={submit} autocomplete="off">
      <h3>Register a trigger</h3>
      <div class="form-grid">
        <label>
          Trigger id
          <input name="triggerId" data-testid="trigger-form-id" required maxLength={64} placeholder="audit-orders" />
        </label>
        <label>
          Database
          <input name="database" data-testid="trigger-form-database" defaultValue="default" />
        </label>
        <label class="wide">
          <span>
            Collection pattern (<code>*</code>, <code>{'{name}'}</code>, a final <code>**</code>)
          </span>
          <input name="collection" data-testid="trigger-form-collection" required placeholder="orders" />
        </label>
        <label class="wide">
          URL
          <input name="url" data-testid="trigger-form-url" required placeholder="https://hooks.example.com/loom" />
        </label>
        <fieldset class="wide">
          <legend>Events</legend>
          {EVENTS.map((ev) => (
            <label class="check" key={ev}>
              <input type="checkbox" data-testid={`trigger-form-event-${ev}`} checked={events.includes(ev)} onChange={(e) => toggle(ev, e.currentTarget.checked)} />
              {ev}
            </label>
          ))}
        </fieldset>
        <label class="wide">
          <span>
            Condition (CEL over <code>event</code>, optional)
          </span>
          <input name="condition" class="mono" data-testid="trigger-form-condition" placeholder="event.document.data.total > 100" />
        </label>
        <label class="wide">
          Secret (whsec_…, optional: generated and shown once when empty)
          <input name="secret" type="password" data-testid="trigger-form-secret" autocomplete="new-password" />
        </label>
        <label>
          Max attempts
          <input name="maxAttempts" type="number" min="1" max="100" data-testid="trigger-form-max-attempts" placeholder="8" />
        </label>
        <label>
          Initial backoff
          <input name="initialBackoff" data-testid="trigger-form-initial-backoff" placeholder="5s" />
        </label>
        <label>
          Max backoff
          <input name="maxBackoff" data-testid="trigger-form-max-backoff" placeholder="10h" />
        </label>
        <label>
          Timeout
          <input name="timeout" data-testid="trigger-form-timeout" placeholder="30s" />
        </label>
        <label class="wide">
          Ordering key (CEL string, optional)
          <input name="orderingKey" class="mono" data-testid="trigger-form-ordering-key" placeholder="event.params.chatId" />
        </label>
        <label class="wide">
          Headers (JSON object, optional)
          <input name="headers" class="mono" data-testid="trigger-form-headers" placeholder='{"X-Team":"core"}' />
        </label>
        <label class="check">
          <input name="enabled" type="checkbox" data-testid="trigger-form-enabled" defaultChecked />
          Enabled
        </label>
      </div>
      <ErrorBox error={error} testid="trigger-form-error" />
      <div class="row">
        <button type="submit" class="primary" data-testid="trigger-form-submit" disabled={busy}>
          {busy ? 'Registering…' : 'Register'}
        </button>
        <button type="button" data-testid="trigger-form-cancel" onClick={onCancel}>
          Cancel
        </button>
      </div>
    </form>
  );
}
