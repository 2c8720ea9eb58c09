// Unit tests of the console's session (src/api.js), realtime client
// (src/ws.js) and router (src/router.js) against a fake fetch, WebSocket and
// location. @preact/signals is stubbed (stub/hooks.mjs), so no npm package
// is needed.
import { test, mock } from 'node:test';
import assert from 'node:assert/strict';
import { register } from 'node:module';

register('./stub/hooks.mjs', import.meta.url);

// A hand-edited link with a malformed escape: the router must not throw.
globalThis.location = { hash: '#/data/%E0/x', protocol: 'http:', host: 'console.test', origin: 'http://console.test' };
globalThis.addEventListener = () => {};

// fetch answers from `handler`; every call is recorded.
let handler = null;
const calls = [];
globalThis.fetch = (url, opts) => {
  calls.push({ url, auth: opts.headers?.Authorization });
  return handler(url, opts);
};
function answer(status, body) {
  return {
    status,
    ok: status >= 200 && status < 300,
    headers: new Headers(),
    text: async () => (body === undefined ? '' : JSON.stringify(body)),
  };
}
const tokenBody = (t) => ({ access_token: t, username: 'admin', roles: ['admin'], expires_in: 900 });

const sockets = [];
class FakeSocket {
  static OPEN = 1;
  constructor(url) {
    this.url = url;
    this.readyState = 0;
    this.sent = [];
    sockets.push(this);
  }
  send(s) {
    this.sent.push(JSON.parse(s));
  }
  close() {
    this.readyState = 3;
  }
  // Test helpers: the server's side.
  opened() {
    this.readyState = 1;
    this.onopen();
  }
  closed() {
    this.readyState = 3;
    this.onclose();
  }
  message(m) {
    this.onmessage({ data: JSON.stringify(m) });
  }
}
globalThis.WebSocket = FakeSocket;

const { route } = await import('../../src/router.js');
const api = await import('../../src/api.js');
const ws = await import('../../src/ws.js');

test('a malformed escape in the hash is kept as typed', () => {
  assert.equal(route.value.page, 'data');
  assert.deepEqual(route.value.parts, ['%E0', 'x']);
});

test('a 401 for a token already replaced retries with the new one, without another refresh', async () => {
  handler = async () => answer(200, tokenBody('A'));
  await api.signIn({ adminKey: 'k' });
  calls.length = 0;
  let release;
  const late = new Promise((r) => (release = r));
  handler = async (url, opts) => {
    if (url.endsWith('/refresh')) return answer(200, tokenBody('B'));
    const auth = opts.headers.Authorization;
    if (url === '/slow' && auth === 'Bearer A') return late; // answers 401 after the refresh
    return auth === 'Bearer B' ? answer(200, { ok: true }) : answer(401, { code: 'UNAUTHENTICATED' });
  };
  const slow = api.request('GET', '/slow');
  await api.request('GET', '/fast'); // 401 → refresh → B → retried
  release(answer(401, { code: 'UNAUTHENTICATED' }));
  const res = await slow;
  assert.equal(res.status, 200);
  assert.equal(calls.filter((c) => c.url.endsWith('/refresh')).length, 1, 'one refresh for both 401s');
  assert.equal(calls.at(-1).auth, 'Bearer B');
});

test('a refresh that answers after sign-out does not bring the session back', async () => {
  handler = async () => answer(200, tokenBody('C'));
  await api.signIn({ adminKey: 'k' });
  let release;
  handler = async (url) => (url.endsWith('/refresh') ? new Promise((r) => (release = r)) : answer(204));
  const pending = api.refresh();
  await api.signOut();
  assert.equal(api.session.value, null);
  release(answer(200, tokenBody('D')));
  await pending;
  assert.equal(api.session.value, null, 'the session came back after sign-out');
  assert.equal(api.currentToken(), null);
});

test('a refresh that fails after a new sign-in does not end the new session', async () => {
  await api.signOut();
  let release;
  handler = async (url) => (url.endsWith('/refresh') ? new Promise((r) => (release = r)) : answer(200, tokenBody('S')));
  const pending = api.refresh().catch(() => {}); // as at page load: no session yet
  await api.signIn({ adminKey: 'k' });
  release(answer(401, { code: 'UNAUTHENTICATED', message: 'no session' }));
  await pending;
  assert.equal(api.currentToken(), 'S', 'the stale refresh ended the new session');
  assert.equal(api.session.value?.username, 'admin');
  await api.signOut(); // its refresh timer is real: the mocked timers below cannot clear it
});

test('realtime: the reconnect backoff resets only once a connection is accepted', async (t) => {
  t.mock.timers.enable({ apis: ['setTimeout'] });
  handler = async () => answer(200, tokenBody('E'));
  await api.signIn({ adminKey: 'k' });
  sockets.length = 0;
  const off = ws.subscribe({ database: 'backoff', query: { collection: 'c' } }, () => {});
  assert.equal(sockets.length, 1);
  sockets[0].opened();
  sockets[0].closed(); // refused before auth_ack
  t.mock.timers.tick(500);
  assert.equal(sockets.length, 2, 'first retry after 500 ms');
  sockets[1].opened();
  sockets[1].closed(); // refused again: the wait doubles
  t.mock.timers.tick(500);
  assert.equal(sockets.length, 2, 'a socket that opened but was never accepted reset the backoff');
  t.mock.timers.tick(500);
  assert.equal(sockets.length, 3);
  sockets[2].opened();
  sockets[2].message({ type: 'auth_ack' });
  sockets[2].closed(); // accepted, then dropped: back to 500 ms
  t.mock.timers.tick(500);
  assert.equal(sockets.length, 4);
  off();
});

test('realtime: a subscription the server ended is not resubscribed on reconnect', async (t) => {
  t.mock.timers.enable({ apis: ['setTimeout'] });
  handler = async () => answer(200, tokenBody('G'));
  await api.signIn({ adminKey: 'k' });
  sockets.length = 0;
  const offBad = ws.subscribe({ database: 'ended', query: { collection: 'bad' } }, () => {});
  const offGood = ws.subscribe({ database: 'ended', query: { collection: 'good' } }, () => {});
  sockets[0].opened();
  sockets[0].message({ type: 'auth_ack' });
  const subs = (s) => s.sent.filter((m) => m.type === 'subscribe');
  const [bad, good] = subs(sockets[0]);
  sockets[0].message({ type: 'error', id: bad.id, payload: { code: 'PERMISSION_DENIED', message: 'no' } });
  sockets[0].closed();
  t.mock.timers.tick(500);
  sockets[1].opened();
  sockets[1].message({ type: 'auth_ack' });
  assert.deepEqual(
    subs(sockets[1]).map((m) => m.id),
    [good.id],
    'the ended subscription was sent again',
  );
  offBad();
  offGood();
});

test('realtime: a conn ended by sign-out does not drop the next one of its database', async () => {
  handler = async (url) => (url.endsWith('/logout') ? answer(204) : answer(200, tokenBody('F')));
  await api.signIn({ adminKey: 'k' });
  sockets.length = 0;
  const offOld = ws.subscribe({ database: 'guard', query: { collection: 'c' } }, () => {});
  await api.signOut(); // closes the conn; its page unsubscribes later
  await api.signIn({ adminKey: 'k' });
  const offNew = ws.subscribe({ database: 'guard', query: { collection: 'c' } }, () => {});
  assert.equal(sockets.length, 2);
  offOld();
  const offThird = ws.subscribe({ database: 'guard', query: { collection: 'd' } }, () => {});
  assert.equal(sockets.length, 2, 'the old conn removed the new one from the map: a third socket opened');
  offThird();
  offNew();
  await api.signOut(); // clears the refresh timer, so the run can end
});
