// Access → users: GET /admin/v1/users (paged by username, prefix search) and
// PUT /admin/v1/users/{uid}/roles. Setting roles revokes the user's refresh
// tokens on the server; access tokens already issued keep the old roles
// until they expire, which the panel says.
import { useEffect, useRef, useState } from 'preact/hooks';
import { api } from '../api.js';
import { ErrorBox, More, Time, useAction } from '../ui.jsx';

const PAGE = 50;

function usersURL(prefix, after) {
  const q = new URLSearchParams({ limit: String(PAGE) });
  if (prefix) q.set('prefix', prefix);
  if (after) q.set('after', after);
  return `/admin/v1/users?${q}`;
}

/** "a, b c" → ["a", "b", "c"]: roles are single words (no spaces). */
export function splitRoles(text) {
  return String(text)
    .split(/[\s,]+/)
    .filter(Boolean);
}

function RolesEditor({ user, onSaved, onCancel }) {
  const [text, setText] = useState(user.roles.join(', '));
  const { busy, error, run } = useAction();
  function save(e) {
    e.preventDefault();
    run(async () => {
      const r = await api.put(`/admin/v1/users/${encodeURIComponent(user.uid)}/roles`, { roles: splitRoles(text) });
      onSaved(r.body);
    });
  }
  return (
    <form class="row" onSubmit={save}>
      <input
        data-testid="user-roles-input"
        value={text}
        onInput={(e) => setText(e.currentTarget.value)}
        placeholder="user, admin"
        aria-label={`Roles of ${user.username}`}
      />
      <button class="primary" type="submit" data-testid="user-roles-save" disabled={busy}>
        Save
      </button>
      <button type="button" data-testid="user-roles-cancel" onClick={onCancel}>
        Cancel
      </button>
      <ErrorBox error={error} testid="user-roles-error" />
    </form>
  );
}

export default function Users() {
  const [prefix, setPrefix] = useState('');
  const [users, setUsers] = useState([]);
  const [cursor, setCursor] = useState(null);
  const [error, setError] = useState(null);
  const [loading, setLoading] = useState(false);
  const [editing, setEditing] = useState(null);
  const [saved, setSaved] = useState(null);
  const gen = useRef(0);

  async function load(after) {
    const g = ++gen.current;
    setLoading(true);
    setError(null);
    try {
      const r = await api.get(usersURL(prefix, after));
      if (g !== gen.current) return; // a newer search answered or is on its way
      setUsers((old) => (after ? [...old, ...r.body.users] : r.body.users));
      setCursor(r.body.nextCursor);
    } catch (err) {
      if (g === gen.current) setError(err);
    } finally {
      if (g === gen.current) setLoading(false);
    }
  }
  // Search as the prefix is typed (debounced).
  useEffect(() => {
    const t = setTimeout(() => load(null), 200);
    return () => clearTimeout(t);
  }, [prefix]);

  return (
    <div class="panel" data-testid="users-panel">
      <div class="page-header">
        <h3>Users</h3>
        <div class="actions">
          <input
            data-testid="users-prefix"
            placeholder="Username starts with…"
            value={prefix}
            onInput={(e) => setPrefix(e.currentTarget.value)}
          />
        </div>
      </div>
      <p class="small muted">
        Changing a user's roles signs them out of every refresh token at once; an access token already issued keeps the old roles until it
        expires (at most its lifetime, 15 minutes by default).
      </p>
      <ErrorBox error={error} />
      {saved ? (
        <p class="notice" data-testid="user-roles-saved">
          Roles of {saved.username}: {saved.roles.length ? saved.roles.join(', ') : '(none)'}
        </p>
      ) : null}
      <table data-testid="users-table">
        <thead>
          <tr>
            <th>Username</th>
            <th>Roles</th>
            <th>Created</th>
            <th>UID</th>
            <th />
          </tr>
        </thead>
        <tbody>
          {users.map((u) => (
            <tr key={u.uid} data-testid={`user-row-${u.username}`}>
              <td>{u.username}</td>
              <td data-testid="user-roles">
                {editing === u.uid ? (
                  <RolesEditor
                    user={u}
                    onCancel={() => setEditing(null)}
                    onSaved={(nu) => {
                      setUsers((old) => old.map((x) => (x.uid === nu.uid ? { ...x, ...nu } : x)));
                      setEditing(null);
                      setSaved(nu);
                    }}
                  />
                ) : u.roles.length ? (
                  u.roles.map((r) => (
                    <span key={r} class="badge">
                      {r}
                    </span>
                  ))
                ) : (
                  <span class="muted">none</span>
                )}
              </td>
              <td>
                <Time value={u.createdAt} />
              </td>
              <td class="mono small">{u.uid}</td>
              <td>
                {editing === u.uid ? null : (
                  <button data-testid={`user-edit-${u.username}`} onClick={() => setEditing(u.uid)}>
                    Edit roles
                  </button>
                )}
              </td>
            </tr>
          ))}
          {!loading && users.length === 0 ? (
            <tr>
              <td colspan="5" class="muted">
                No users{prefix ? ` starting with "${prefix}"` : ''}.
              </td>
            </tr>
          ) : null}
        </tbody>
      </table>
      <More cursor={cursor} loading={loading} onMore={() => load(cursor)} testid="users-more" />
    </div>
  );
}
