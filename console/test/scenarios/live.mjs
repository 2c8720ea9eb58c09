// Live: a change written through the API arrives in the tail of a
// collection-group pattern within seconds, with its op and a link to the
// document; a pattern the realtime API refuses shows its error.
export const name = 'live';

const DOCS = '/api/v1/databases/default/documents';

export default async function (t) {
  const { page } = t;
  // The page's clock is Playwright's, so the session refresh (a minute
  // before the 10 min token expires) can be brought forward below; until
  // then time flows as usual.
  await page.clock.install();
  // Every auth message the page sends on a realtime socket, and the acks.
  const auths = [];
  let acks = 0;
  const sockets = [];
  page.on('websocket', (ws) => {
    sockets.push(ws);
    ws.on('framesent', (f) => {
      const m = parse(f.payload);
      if (m && m.type === 'auth') auths.push(m.payload && m.payload.token);
    });
    ws.on('framereceived', (f) => {
      if (parse(f.payload)?.type === 'auth_ack') acks++;
    });
  });
  await t.signIn();
  await t.id('nav-live').click();
  await t.id('page-live').waitFor();

  // A malformed pattern: the subscription's error is shown, nothing runs.
  await t.id('live-pattern').fill('rooms/*/');
  await t.id('live-filters').fill('[{"field":"n","op":"~~","value":1}]');
  await t.id('live-start').click();
  await t.id('live-error').first().waitFor();
  t.assert((await t.id('live-error').first().textContent()).trim().length > 10, 'the subscription error has no message');

  // The real tail: one pattern, no filters.
  await t.id('live-filters').fill('');
  await t.id('live-pattern').fill('rooms/*/messages');
  await t.id('live-start').click();
  await t.expectText(t.id('live-status'), /^live$/);
  t.assert((await t.id('live-error').count()) === 0, 'an error is left after a good start');

  const put = await t.api('PUT', `${DOCS}/rooms/live-r1/messages/m1`, { doc: { text: 'hello from the live scenario', n: 1 } });
  t.assert(put.status === 201, `PUT: ${put.status} ${JSON.stringify(put.body)}`);
  const upd = await t.api('PATCH', `${DOCS}/rooms/live-r1/messages/m1`, { doc: { n: 2 } });
  t.assert(upd.status === 200, `PATCH: ${upd.status} ${JSON.stringify(upd.body)}`);
  // Outside the pattern: must not appear.
  await t.api('PUT', `${DOCS}/live-other/x1`, { doc: { text: 'not tailed' } });

  const rows = page.locator('[data-testid="live-row"][data-path="rooms/live-r1/messages/m1"]');
  await t.eventually(async () => (await rows.count()) === 2, { timeout: 5000, what: 'the create and the update in the live tail' });
  // Newest first: the update, then the create.
  const first = t.id('live-row').first();
  t.assert((await first.getAttribute('data-op')) === 'update', `the newest row is ${await first.getAttribute('data-op')}, want update`);
  t.assert((await t.id('live-row').nth(1).getAttribute('data-op')) === 'create', 'the second row is not the create');
  await t.expectText(first.getByTestId('live-row-path'), 'rooms/live-r1/messages/m1');
  const link = await first.getByTestId('live-row-path').getAttribute('href');
  t.assert(link === '#/data/default/rooms/live-r1/messages/m1', `the row links to ${link}`);
  t.assert((await page.locator('[data-testid="live-row"][data-path="live-other/x1"]').count()) === 0, 'a change outside the pattern was shown');

  // A token refresh re-authenticates the open socket with the new token
  // (an auth message, acknowledged), and the tail goes on.
  const [sent, acked] = [auths.length, acks];
  t.assert(sent >= 1 && acked === sent, `auth messages before the refresh: ${sent} sent, ${acked} acked`);
  const refreshed = page.waitForResponse((r) => r.url().endsWith('/admin/v1/console/refresh'));
  await page.clock.fastForward('09:30');
  t.assert((await refreshed).status() === 200, 'the session refresh failed');
  await t.eventually(async () => auths.length === sent + 1 && acks === acked + 1, { what: 'the socket re-authenticated after the refresh' });
  t.assert(auths[sent] && auths[sent] !== auths[sent - 1], 'the socket was re-authenticated with the old token');
  await t.api('PATCH', `${DOCS}/rooms/live-r1/messages/m1`, { doc: { n: 3 } });
  await t.eventually(async () => (await rows.count()) === 3, { timeout: 5000, what: 'a change after the re-authentication' });

  // The preview expands to the whole document.
  await t.expectText(first.getByTestId('live-row-expand'), 'hello from the live scenario');
  await first.getByTestId('live-row-expand').click();
  await t.expectText(first, '"version": 3');

  // A second pattern merges into the same table, each row labelled.
  await t.id('live-pattern').fill('rooms/*/messages, live-other');
  await t.id('live-start').click();
  await t.expectText(t.id('live-status'), /^live$/);
  await t.api('PUT', `${DOCS}/live-other/x2`, { doc: { text: 'second pattern' } });
  await t.api('PUT', `${DOCS}/rooms/live-r2/messages/m1`, { doc: { text: 'a second room' } });
  await t.eventually(async () => (await page.locator('[data-testid="live-row"][data-path="live-other/x2"]').count()) === 1, { timeout: 5000, what: 'the second pattern’s change' });
  await t.eventually(async () => (await page.locator('[data-testid="live-row"][data-path="rooms/live-r2/messages/m1"]').count()) === 1, { timeout: 5000, what: 'the first pattern’s change after a restart' });
  await t.shot('live');

  // Stop ends the subscriptions: with none left the page closes its
  // socket, and a later change does not arrive.
  await t.id('live-stop').click();
  await t.expectText(t.id('live-status'), 'stopped');
  await t.eventually(async () => sockets.length > 0 && sockets.every((ws) => ws.isClosed()), { what: 'every realtime socket closed after Stop' });
  const [before, opened] = [await t.id('live-row').count(), sockets.length];
  await t.api('PUT', `${DOCS}/rooms/live-r1/messages/m2`, { doc: { text: 'after stop' } });
  // Nothing to wait for when nothing should happen: a short window in
  // which a reopened socket or a late row would show.
  await page.waitForTimeout(500);
  t.assert(sockets.length === opened, 'a realtime socket was opened after Stop');
  t.assert((await t.id('live-row').count()) === before, 'a change arrived after Stop');
}

function parse(payload) {
  try {
    return JSON.parse(typeof payload === 'string' ? payload : payload.toString());
  } catch {
    return null;
  }
}
