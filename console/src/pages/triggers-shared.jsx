// What the Triggers and Deliveries pages share: reading triggers through
// the admin API, the secrets that reading reveals, and the
// small views of a trigger's status, counters and last error.
//
// GET /admin/v1/triggers (and /{id}) returns a generated signing secret the
// first time anyone reads it, and never again. Every read here therefore
// takes such secrets out of the answer into `revealed`, which <Revealed/>
// shows once; dismissing it (or signing out) forgets the secret. Nothing
// else keeps it.
import { signal } from '@preact/signals';
import { api, onToken } from '../api.js';
import { href } from '../router.js';
import { Badge, ShowOnce, Time, fmtDuration } from '../ui.jsx';

export const TRIGGERS = '/admin/v1/triggers';
export const DELIVERIES = '/admin/v1/deliveries';

/** Secrets waiting to be shown once: [{id, secret, why}]. */
const revealed = signal([]);
// Signing out forgets them: the next user of this tab must not see them.
onToken((tok) => {
  if (!tok) revealed.value = [];
});

/** Queues t's secret (if the answer carried one) and returns t without it. */
export function takeSecret(t, why) {
  if (!t || !t.secret) return t;
  const { secret, ...rest } = t;
  revealed.value = [...revealed.value, { id: t.triggerId, secret, why }];
  return rest;
}

/** Every trigger, secrets taken out. */
export async function listTriggers() {
  const res = await api.get(TRIGGERS);
  return (res.body.triggers || []).map((t) => takeSecret(t, 'generated'));
}

/** One trigger, its secret taken out. */
export async function getTrigger(id) {
  const res = await api.get(`${TRIGGERS}/${encodeURIComponent(id)}`);
  return takeSecret(res.body, 'generated');
}

/** Posts an action (enable, disable, rotate-secret) and returns the trigger. */
export async function triggerAction(id, action) {
  const res = await api.post(`${TRIGGERS}/${encodeURIComponent(id)}/${action}`);
  return takeSecret(res.body, action === 'rotate-secret' ? 'rotated' : 'generated');
}

const WHY = {
  generated: 'Loom generated this signing secret; it is shown this once.',
  rotated: 'The new signing secret. The previous one keeps signing for 24 hours.',
  registered: 'The signing secret of the new trigger.',
};

/** The first revealed secret, in the shared show-once dialog. */
export function Revealed() {
  const first = revealed.value[0];
  if (!first) return null;
  return (
    <div data-testid="trigger-secret">
      <ShowOnce
        title={`Signing secret of ${first.id} — ${WHY[first.why] || ''}`}
        secret={first.secret}
        onClose={() => {
          revealed.value = revealed.value.slice(1);
        }}
      />
    </div>
  );
}

/** A latency in ms as "850 ms" or "1.2 s" (— when missing). */
export function ms(v) {
  return fmtDuration(v) ?? '—';
}

export function TriggerStatus({ t }) {
  return (
    <div>
      <Badge status={t.status} testid="trigger-status" />
      {t.disabledReason ? (
        <div class="small muted" data-testid="trigger-disabled-reason">
          {t.disabledReason}
        </div>
      ) : null}
    </div>
  );
}

/** The counters: key, column label, what it counts. */
export const COUNTS = [
  ['matched', 'Matched', 'changes that matched the trigger'],
  ['delivered', 'Delivered', 'deliveries a 2xx answered'],
  ['dead', 'Dead', 'deliveries that ran out of attempts'],
  ['failedAttempts', 'Failed', 'failed attempts (each retry counts)'],
  ['evalErrors', 'Eval errors', 'condition, orderingKey or deliverAt errors at evaluation'],
];

/** One counter; a non-zero dead count links to those dead letters. */
export function Count({ t, k }) {
  const n = t.counts?.[k] ?? 0;
  if (k === 'dead' && n > 0) {
    return (
      <a class="bad-text" data-testid="trigger-count-dead" href={href('deliveries', { triggerId: t.triggerId, status: 'dead' })}>
        {n}
      </a>
    );
  }
  return <span data-testid={`trigger-count-${k}`}>{n}</span>;
}

/** Every counter, labelled (the detail view). */
export function Counts({ t }) {
  return (
    <dl class="counts">
      {COUNTS.map(([k, label, title]) => (
        <div key={k} title={title}>
          <dt>{label}</dt>
          <dd>
            <Count t={t} k={k} />
          </dd>
        </div>
      ))}
    </dl>
  );
}

export function LastError({ t }) {
  if (!t.lastError && !t.fileError) return <span class="muted">—</span>;
  return (
    <div data-testid="trigger-last-error">
      {t.lastError ? (
        <>
          <div class="error-text">{t.lastError}</div>
          <div class="small muted">
            <Time value={t.lastErrorAt} />
          </div>
        </>
      ) : null}
      {t.fileError ? <div class="error-text">triggers.json: {t.fileError}</div> : null}
    </div>
  );
}
