// Access → service keys: GET /admin/v1/keys (names and roles, never a key),
// POST /admin/v1/keys (the new key is in the answer once: ShowOnce holds it
// until dismissed, nothing else keeps it), DELETE /admin/v1/keys/{name}.
import { useState } from 'preact/hooks';
import { api } from '../api.js';
import { ErrorBox, ShowOnce, Time, useAction, useAsync } from '../ui.jsx';
import { splitRoles } from './access-users.jsx';

// Keys Loom issues itself: `loom serve` mints "loom-agents" for its agent
// runtime at every start (app/agents.go, agentsKeyName). Revoking it stops
// the runtime's handlers until the next start, hence the extra confirmation.
const SYSTEM_PREFIX = 'loom-';
const isSystem = (name) => name.startsWith(SYSTEM_PREFIX);

function Revoke({ name, onDone }) {
  const [asking, setAsking] = useState(false);
  const [ack, setAck] = useState(false);
  const { busy, error, run } = useAction();
  const system = isSystem(name);
  if (!asking) {
    return (
      <button class="danger" data-testid={`key-revoke-${name}`} onClick={() => setAsking(true)}>
        Revoke
      </button>
    );
  }
  const go = () =>
    run(async () => {
      await api.del(`/admin/v1/keys/${encodeURIComponent(name)}`);
      onDone();
    });
  return (
    <div class="confirm">
      <span>Revoke {name}? Clients using it get 401 at once.</span>
      {system ? (
        <label>
          <input type="checkbox" data-testid="key-revoke-system-ack" checked={ack} onChange={(e) => setAck(e.currentTarget.checked)} />
          Loom issued this key for its own agent runtime: revoking it stops the runtime until the server restarts.
        </label>
      ) : null}
      <div class="row">
        <button class="danger" data-testid="key-revoke-confirm" disabled={busy || (system && !ack)} onClick={go}>
          Revoke
        </button>
        <button data-testid="key-revoke-cancel" onClick={() => setAsking(false)}>
          Cancel
        </button>
      </div>
      <ErrorBox error={error} testid="key-revoke-error" />
    </div>
  );
}

function CreateKey({ onCreated }) {
  const [name, setName] = useState('');
  const [roles, setRoles] = useState('service');
  const { busy, error, run } = useAction();
  function submit(e) {
    e.preventDefault();
    run(async () => {
      const r = await api.post('/admin/v1/keys', { name, roles: splitRoles(roles) });
      setName('');
      onCreated(r.body);
    });
  }
  return (
    <form class="row bottom" onSubmit={submit} data-testid="key-form">
      <label>
        Name
        <input data-testid="key-name" value={name} required onInput={(e) => setName(e.currentTarget.value)} />
      </label>
      <label>
        Roles (comma-separated)
        <input data-testid="key-roles" value={roles} onInput={(e) => setRoles(e.currentTarget.value)} />
      </label>
      <button class="primary" type="submit" data-testid="key-create" disabled={busy}>
        Create key
      </button>
      <ErrorBox error={error} testid="key-error" />
    </form>
  );
}

export default function Keys() {
  const list = useAsync(() => api.get('/admin/v1/keys').then((r) => r.body), []);
  const [created, setCreated] = useState(null);
  const keys = list.data?.keys || [];
  return (
    <div class="panel" data-testid="keys-panel">
      <h3>Service keys</h3>
      <p class="small muted">A key is shown once, when it is created; Loom stores only its hash.</p>
      <CreateKey
        onCreated={(k) => {
          setCreated(k);
          list.reload();
        }}
      />
      <ShowOnce title={created ? `Service key ${created.name}` : ''} secret={created?.key} onClose={() => setCreated(null)} />
      <ErrorBox error={list.error} />
      <table data-testid="keys-table">
        <thead>
          <tr>
            <th>Name</th>
            <th>Roles</th>
            <th>Created</th>
            <th />
          </tr>
        </thead>
        <tbody>
          {keys.map((k) => (
            <tr key={k.name} data-testid={`key-row-${k.name}`}>
              <td>
                {k.name}{' '}
                {isSystem(k.name) ? (
                  <span class="badge" data-testid="key-system" title="Issued by Loom itself">
                    system
                  </span>
                ) : null}
              </td>
              <td>{(k.roles || []).join(', ')}</td>
              <td>
                <Time value={k.createdAt} />
              </td>
              <td>
                <Revoke name={k.name} onDone={list.reload} />
              </td>
            </tr>
          ))}
          {!list.loading && keys.length === 0 ? (
            <tr>
              <td colspan="4" class="muted">
                No service keys.
              </td>
            </tr>
          ) : null}
        </tbody>
      </table>
      {list.data?.truncated ? <p class="small muted">Only the first {keys.length} keys are listed.</p> : null}
    </div>
  );
}
