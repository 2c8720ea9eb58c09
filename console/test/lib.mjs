// The `t` object every scenario receives: the page, the node under test and
// a few helpers. Kept small on purpose; console/test/README.md documents it.
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

/** Reads the harness's environment (set by console/browser_test.go). */
export function harnessEnv(env = process.env) {
  const need = (k) => {
    if (!env[k]) throw new Error(`${k} is not set: run the scenarios through go test -run TestConsoleBrowser ./console/`);
    return env[k];
  };
  return {
    url: need('LOOM_URL').replace(/\/+$/, ''),
    adminKey: need('LOOM_ADMIN_KEY'),
    receiver: need('LOOM_RECEIVER').replace(/\/+$/, ''),
    rulesFile: need('LOOM_RULES_FILE'),
    chromium: env.LOOM_CHROMIUM || '/usr/bin/chromium',
    screenshots: env.LOOM_CONSOLE_SCREENSHOTS || '',
  };
}

/** Sends one request to url and reads the answer: {status, headers, body}. */
async function send(url, method, body, headers) {
  const h = { ...headers };
  let payload;
  if (body !== undefined && body !== null) {
    payload = typeof body === 'string' ? body : JSON.stringify(body);
    if (!Object.keys(h).some((k) => k.toLowerCase() === 'content-type')) h['Content-Type'] = 'application/json';
  }
  for (const k of Object.keys(h)) if (h[k] === null || h[k] === undefined || h[k] === '') delete h[k];
  const res = await fetch(url, { method, headers: h, body: payload, redirect: 'manual' });
  const text = await res.text();
  let parsed = text;
  try {
    parsed = text ? JSON.parse(text) : null;
  } catch {
    // not JSON: the text itself
  }
  return { status: res.status, headers: res.headers, body: parsed };
}

/** Polls fn until it returns a truthy value (which it resolves) or throws no more. */
export async function eventually(fn, { timeout = 10000, interval = 100, what = 'a condition' } = {}) {
  const deadline = Date.now() + timeout;
  let last;
  for (;;) {
    try {
      const v = await fn();
      if (v) return v;
      last = `it returned ${JSON.stringify(v)}`;
    } catch (err) {
      last = err && err.message ? err.message : String(err);
    }
    if (Date.now() >= deadline) throw new Error(`timed out after ${timeout} ms waiting for ${what} (last: ${last})`);
    await new Promise((r) => setTimeout(r, interval));
  }
}

/**
 * makeT builds a scenario's `t` over its fresh browser context and page.
 * env is harnessEnv(); name is the scenario's.
 */
export function makeT({ env, context, page, name }) {
  const id = (testid, p = page) => p.getByTestId(testid);

  const t = {
    name,
    page,
    context,
    url: env.url,
    adminKey: env.adminKey,
    rulesFile: env.rulesFile,

    /** page.getByTestId(testid) on page (default t.page). */
    id,

    /** Throws msg unless cond. */
    assert(cond, msg = 'assertion failed') {
      if (!cond) throw new Error(msg);
    },

    eventually,

    /** Waits (10 s) until locator's text contains text (a string) or matches it (a RegExp). */
    async expectText(locator, text, { timeout = 10000 } = {}) {
      let seen = '';
      const ok = (s) => (text instanceof RegExp ? text.test(s) : s.includes(text));
      await eventually(
        async () => {
          seen = await locator.innerText({ timeout: Math.min(timeout, 2000) });
          return ok(seen);
        },
        { timeout, what: `text ${text instanceof RegExp ? text : JSON.stringify(text)} in ${locator}` },
      ).catch((err) => {
        throw new Error(`${err.message}; text was ${JSON.stringify(seen.slice(0, 300))}`);
      });
    },

    /** Calls the API with the admin key (headers may replace or, with '' or null, drop Authorization). */
    api(method, path, body, headers = {}) {
      return send(env.url + path, method, body, { Authorization: `Bearer ${env.adminKey}`, ...headers });
    },

    /** Signs a user up (anonymously, as an app would) → {uid, token}. */
    async signUp(username, password) {
      const up = await t.api('POST', '/auth/v1/signup', { username, password }, { Authorization: null });
      if (up.status !== 200) throw new Error(`signup ${username}: ${up.status} ${JSON.stringify(up.body)}`);
      const token = up.body.access_token;
      const me = await t.api('GET', '/auth/v1/me', null, { Authorization: `Bearer ${token}` });
      if (me.status !== 200) throw new Error(`me ${username}: ${me.status} ${JSON.stringify(me.body)}`);
      return { uid: me.body.uid, token };
    },

    /**
     * Opens the console on p (default t.page) and submits the sign-in form
     * with creds: {key} (the admin key when creds is omitted) or
     * {username, password}. Resolves the status of the session request
     * once it answered; see signIn for waiting on the outcome.
     */
    async submitSignIn(creds = { key: env.adminKey }, p = page) {
      if (!p.url().includes('/console/')) await p.goto(`${env.url}/console/`);
      await id('signin-form', p).waitFor();
      if (creds.key !== undefined) {
        await id('signin-mode-key', p).click();
        await id('signin-key', p).fill(creds.key);
      } else {
        await id('signin-mode-user', p).click();
        await id('signin-username', p).fill(creds.username);
        await id('signin-password', p).fill(creds.password);
      }
      // Waiting for the answer (not for the form's state) tells a fresh
      // error from the one a previous attempt left on screen.
      const answered = p.waitForResponse((r) => r.url().endsWith('/admin/v1/console/session'));
      await id('signin-submit', p).click();
      return (await answered).status();
    },

    /** Signs in with the admin key and waits for the nav; throws the form's error otherwise. */
    async signIn(p = page) {
      await t.submitSignIn({ key: env.adminKey }, p);
      await signedIn(p);
    },

    /** Signs in as a user (who needs the admin role) and waits for the nav. */
    async signInUser(username, password, p = page) {
      await t.submitSignIn({ username, password }, p);
      await signedIn(p);
    },

    receiver: {
      /** The URL a trigger should deliver to. */
      url: `${env.receiver}/hook`,
      /** Makes the receiver answer later deliveries with status. */
      async setStatus(status) {
        const r = await send(`${env.receiver}/control`, 'POST', { status }, {});
        if (r.status !== 204) throw new Error(`receiver /control: ${r.status} ${JSON.stringify(r.body)}`);
      },
      /** Every delivery received so far: [{n, path, headers, body, status, at}]. */
      async requests() {
        const r = await send(`${env.receiver}/requests`, 'GET');
        if (r.status !== 200) throw new Error(`receiver /requests: ${r.status}`);
        return r.body;
      },
    },

    /** Rewrites the node's rules file (POST /admin/v1/rules/reload applies it). */
    writeRules(text) {
      writeFileSync(env.rulesFile, text);
    },

    /** Saves a screenshot as $LOOM_CONSOLE_SCREENSHOTS/<name>.png (no-op when unset). */
    async shot(shotName, p = page) {
      if (!env.screenshots) return;
      mkdirSync(env.screenshots, { recursive: true });
      await p.screenshot({ path: join(env.screenshots, `${shotName}.png`), animations: 'disabled' });
    },
  };

  async function signedIn(p) {
    const nav = id('nav', p);
    const err = id('signin-error', p);
    await nav.or(err).first().waitFor();
    if (await err.isVisible()) throw new Error(`sign-in refused: ${await err.innerText()}`);
  }

  return t;
}

/** The rules file's text, to restore after a scenario. */
export function readRules(env) {
  return readFileSync(env.rulesFile, 'utf8');
}
