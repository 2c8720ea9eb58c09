// The sign-in screen: the admin key, or the name and password of a user
// with the admin role. The credential is sent once and never stored.
import { useState } from 'preact/hooks';
import { signIn } from '../api.js';
import { ErrorBox, useAction } from '../ui.jsx';

export default function SignIn() {
  const [mode, setMode] = useState('key');
  const { busy, error, run } = useAction();

  function submit(e) {
    e.preventDefault();
    const f = new FormData(e.currentTarget);
    const creds = mode === 'key' ? { adminKey: f.get('key') } : { username: f.get('username'), password: f.get('password') };
    run(() => signIn(creds));
  }

  return (
    <div class="signin">
      <form data-testid="signin-form" onSubmit={submit} autocomplete="off">
        <h1>Loom console</h1>
        <div class="tabs">
          <button type="button" class={mode === 'key' ? 'active' : ''} data-testid="signin-mode-key" onClick={() => setMode('key')}>
            Admin key
          </button>
          <button type="button" class={mode === 'user' ? 'active' : ''} data-testid="signin-mode-user" onClick={() => setMode('user')}>
            User
          </button>
        </div>
        {mode === 'key' ? (
          <label>
            Admin key
            <input name="key" type="password" data-testid="signin-key" required autofocus />
          </label>
        ) : (
          <>
            <label>
              Username
              <input name="username" data-testid="signin-username" required autofocus />
            </label>
            <label>
              Password
              <input name="password" type="password" data-testid="signin-password" required />
            </label>
          </>
        )}
        <ErrorBox error={error} testid="signin-error" />
        <button type="submit" class="primary" data-testid="signin-submit" disabled={busy}>
          {busy ? 'Signing in…' : 'Sign in'}
        </button>
        <p class="muted small">Users need the admin role. The session lasts a few hours and is kept in an HttpOnly cookie.</p>
      </form>
    </div>
  );
}
