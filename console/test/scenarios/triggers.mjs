// Triggers and deliveries: register a trigger from the form (a bad CEL
// condition is refused inline; the generated secret is shown once), watch
// its delivery go dead against a failing receiver with the attempt's status,
// latency and response, replay it once the receiver recovers, and operate
// the trigger (disable, enable, rotate the secret).
export const name = 'triggers';

const ID = 'console-orders';

/**
 * Closes show-once dialogs (e.g. a built-in trigger's generated secret):
 * each Done shows the next queued secret, or closes the dialog.
 */
async function dismissSecrets(t) {
  while (await t.id('secret-once').isVisible()) {
    const shown = await t.id('secret-value').innerText();
    await t.id('secret-close').click();
    // allInnerTexts does not wait: [] once the dialog is gone.
    await t.eventually(async () => (await t.id('secret-value').allInnerTexts())[0] !== shown, {
      what: 'the dialog to close or show the next secret',
    });
  }
}

function row(t, id) {
  return t.page.locator(`[data-testid="trigger-row"][data-id="${id}"]`);
}

export default async function (t) {
  const { page } = t;
  await t.receiver.setStatus(500);
  await t.signIn();
  await t.id('nav-triggers').click();
  await t.id('page-triggers').waitFor();
  await t.id('triggers-table').waitFor();
  await dismissSecrets(t);

  // The form: a bad condition is the API's error, shown inline.
  await t.id('triggers-new').click();
  const form = t.id('trigger-form');
  await form.waitFor();
  await t.id('trigger-form-id').fill(ID);
  await t.id('trigger-form-collection').fill('orders');
  await t.id('trigger-form-url').fill(t.receiver.url);
  await t.id('trigger-form-event-update').uncheck();
  await t.id('trigger-form-event-delete').uncheck();
  await t.id('trigger-form-max-attempts').fill('1');
  await t.id('trigger-form-timeout').fill('5s');
  await t.id('trigger-form-condition').fill('event.documnt.data.total > 0');
  await t.id('trigger-form-submit').click();
  await t.expectText(t.id('trigger-form-error'), 'documnt');
  const none = await t.api('GET', `/admin/v1/triggers/${ID}`);
  t.assert(none.status === 404, `a refused trigger exists: ${none.status}`);

  await t.id('trigger-form-condition').fill('');
  await t.id('trigger-form-submit').click();
  // No secret given: the generated one is shown once, then gone.
  await t.id('secret-once').waitFor();
  await t.expectText(t.id('secret-value'), /^whsec_/);
  await t.id('secret-close').click();
  await t.id('secret-once').waitFor({ state: 'hidden' });
  await t.expectText(t.id('triggers-notice'), `Registered ${ID}`);
  await t.expectText(row(t, ID).getByTestId('trigger-status'), 'enabled');
  await t.expectText(row(t, ID), 'api');
  const got = await t.api('GET', `/admin/v1/triggers/${ID}`);
  t.assert(got.status === 200 && got.body.retryPolicy?.maxAttempts === 1, `registered: ${got.status} ${JSON.stringify(got.body)}`);
  t.assert(JSON.stringify(got.body.events) === '["create"]', `events: ${JSON.stringify(got.body.events)}`);
  t.assert(!got.body.secret, 'the API shows the secret a second time');

  // One order: one delivery, which the failing receiver makes dead.
  const put = await t.api('PUT', '/api/v1/databases/default/documents/orders/o1', { doc: { total: 42 } });
  t.assert(put.status === 201, `PUT orders/o1: ${put.status} ${JSON.stringify(put.body)}`);

  await t.id('nav-deliveries').click();
  await t.id('page-deliveries').waitFor();
  await t.eventually(async () => (await t.id('deliveries-dead-count').textContent()).trim() !== '0' && (await t.id('deliveries-dead-count').textContent()).trim() !== '…', {
    timeout: 15000,
    what: 'a dead delivery in the summary',
  });
  await page.locator(`[data-testid="deliveries-dead-trigger"][data-id="${ID}"]`).click();
  await t.eventually(async () => new URL(page.url()).hash === `#/deliveries?triggerId=${ID}&status=dead`, { what: 'the dead-letter filter in the URL' });
  const dead = t.id('delivery-row').first();
  await t.expectText(dead.getByTestId('delivery-status'), 'dead');
  await t.expectText(dead.getByTestId('delivery-last-status'), 'HTTP 500');
  await t.expectText(dead.getByTestId('delivery-attempts-count'), '1');
  const deliveryId = await dead.getAttribute('data-id');
  await dead.getByTestId('delivery-expand').click();
  const attempt = t.id('delivery-attempt').first();
  await t.expectText(attempt.getByTestId('attempt-status'), 'HTTP 500');
  await t.expectText(attempt.getByTestId('attempt-latency'), /\d+(\.\d)? m?s/);
  await t.expectText(attempt.getByTestId('attempt-response'), '{"received":true}');
  await t.shot('deliveries');

  // The receiver recovers; a replay delivers.
  await t.receiver.setStatus(200);
  await dead.getByTestId('delivery-replay').click();
  await t.expectText(t.id('deliveries-notice'), `Replayed ${deliveryId}: now pending`);
  await t.id('deliveries-status').selectOption('');
  const replayed = page.locator(`[data-testid="delivery-row"][data-id="${deliveryId}"]`);
  await t.eventually(async () => (await replayed.getAttribute('data-status')) === 'delivered', { timeout: 15000, what: 'the replayed delivery delivered' });
  await t.expectText(replayed.getByTestId('delivery-attempts-count'), '2');
  await t.expectText(replayed.getByTestId('delivery-last-status'), 'HTTP 200');
  const hits = (await t.receiver.requests()).filter((r) => r.body && r.body.triggerId === ID);
  t.assert(hits.length === 2 && hits[0].headers['Webhook-Id'] === hits[1].headers['Webhook-Id'], `receiver saw ${hits.length} deliveries of ${ID} (want 2 with one webhook-id)`);

  // Back on Triggers: the counters moved.
  await t.id('nav-triggers').click();
  await t.id('triggers-table').waitFor();
  await t.expectText(row(t, ID).getByTestId('trigger-count-delivered'), '1', { timeout: 10000 });
  await t.expectText(row(t, ID).getByTestId('trigger-count-dead'), '1');

  // Disable, enable.
  await row(t, ID).getByTestId('trigger-disable').click();
  await t.expectText(row(t, ID).getByTestId('trigger-status'), 'disabled');
  t.assert((await t.api('GET', `/admin/v1/triggers/${ID}`)).body.status === 'disabled', 'the API does not say disabled');
  await row(t, ID).getByTestId('trigger-enable').click();
  await t.expectText(row(t, ID).getByTestId('trigger-status'), 'enabled');

  // Rotate: the new secret is shown once and gone when dismissed.
  await row(t, ID).getByTestId('trigger-rotate').click();
  await t.id('secret-once').waitFor();
  await t.expectText(t.id('secret-value'), /^whsec_/);
  await t.id('secret-close').click();
  await t.id('secret-once').waitFor({ state: 'hidden' });
  t.assert(!(await page.content()).includes('whsec_'), 'a secret is left in the page');
  await t.shot('triggers');

  // A secret not yet dismissed is forgotten when the session ends (the
  // dialog covers the nav, so the click is dispatched as an expiry would
  // end it): whoever signs in next in this tab does not see it.
  await row(t, ID).getByTestId('trigger-rotate').click();
  await t.id('secret-once').waitFor();
  await t.id('nav-signout').dispatchEvent('click');
  await t.id('signin-form').waitFor();
  await t.signIn();
  await t.id('triggers-table').waitFor();
  t.assert(!(await t.id('secret-once').isVisible()), 'a secret shown before sign-out is shown again after it');
  t.assert(!(await page.content()).includes('whsec_'), 'a secret shown before sign-out is left in the page');

  // The detail view: the definition, and a way into its deliveries.
  await row(t, ID).getByTestId('trigger-link').click();
  await t.id('trigger-detail').waitFor();
  await t.expectText(t.id('trigger-definition'), '"collection": "orders"');
  await t.id('trigger-deliveries-link').click();
  await t.eventually(async () => (await t.id('delivery-row').count()) === 1, { what: 'the trigger’s one delivery' });

  // Delete (registered triggers only), confirmed inline.
  await t.id('nav-triggers').click();
  await row(t, ID).getByTestId('trigger-delete').click();
  await row(t, ID).getByTestId('trigger-delete-confirm').click();
  await t.expectText(t.id('triggers-notice'), `Deleted ${ID}`);
  t.assert((await t.api('GET', `/admin/v1/triggers/${ID}`)).status === 404, 'the trigger still exists');

  await cancelAndPage(t);
}

// A delivery waiting for its retry is canceled from its row; a log of more
// than a page is read with Load more.
async function cancelAndPage(t) {
  const { page } = t;
  const retry = 'console-retry';
  await t.receiver.setStatus(503);
  const reg = await t.api('POST', '/admin/v1/triggers', {
    triggerId: retry,
    collection: 'console-retry',
    events: ['create'],
    url: t.receiver.url,
    secret: 'whsec_' + Buffer.from('0123456789abcdef0123456789abcdef').toString('base64'),
    retryPolicy: { maxAttempts: 3, initialBackoff: '1h', maxBackoff: '1h' },
  });
  t.assert(reg.status === 201, `register ${retry}: ${reg.status} ${JSON.stringify(reg.body)}`);
  t.assert(reg.body.secret, 'a given secret is not echoed once');
  await t.api('PUT', '/api/v1/databases/default/documents/console-retry/r1', { doc: { n: 1 } });
  await page.goto(`${t.url}/console/#/deliveries?triggerId=${retry}`);
  const row = t.id('delivery-row').first();
  await t.eventually(async () => (await row.getAttribute('data-status')) === 'pending' && (await row.getByTestId('delivery-attempts-count').textContent()) === '1', {
    what: 'a pending delivery after one failed attempt',
  });
  await t.expectText(row.getByTestId('delivery-last-status'), 'HTTP 503');
  t.assert(!(await row.getByTestId('delivery-replay').isVisible()), 'a pending delivery offers replay');
  await row.getByTestId('delivery-cancel').click();
  await t.expectText(t.id('deliveries-notice'), 'now canceled');
  await t.eventually(async () => (await row.getAttribute('data-status')) === 'canceled', { what: 'the canceled row' });

  // 60 deliveries: the first page holds 50, Load more the rest.
  await t.receiver.setStatus(200);
  const writes = Array.from({ length: 60 }, (_, i) => ({ type: 'create', path: `console-retry/p${i}`, data: { i } }));
  const batch = await t.api('POST', '/api/v1/databases/default/batch', { writes });
  t.assert(batch.status === 200, `batch: ${batch.status} ${JSON.stringify(batch.body).slice(0, 300)}`);
  await t.id('deliveries-refresh').click();
  await t.eventually(async () => (await t.id('delivery-row').count()) === 50, { what: 'a first page of 50 deliveries' });
  await t.id('deliveries-more').click();
  await t.eventually(async () => (await t.id('delivery-row').count()) === 61, { what: 'all 61 deliveries after Load more' });
  await t.eventually(async () => !(await t.id('deliveries-more').isVisible()), { what: 'no Load more at the end' });

  // A 1024 px window: the log (every trigger's, ordering keys included)
  // scrolls sideways inside its own box; the page itself does not.
  await page.setViewportSize({ width: 1024, height: 800 });
  await page.goto(`${t.url}/console/#/deliveries`);
  await t.eventually(async () => (await t.id('delivery-row').count()) > 0, { what: 'the delivery log' });
  const widths = await page.evaluate(() => [document.documentElement.scrollWidth, document.documentElement.clientWidth]);
  t.assert(widths[0] <= widths[1], `at 1024 px the page scrolls sideways: ${widths[0]} > ${widths[1]}`);
  // ... and every trigger's actions are in view without scrolling the table.
  await page.goto(`${t.url}/console/#/triggers`);
  await t.id('trigger-row').first().waitFor();
  const cut = await page.evaluate(() =>
    [...document.querySelectorAll('[data-testid="trigger-row"]')]
      .filter((r) => r.querySelector('[data-testid="trigger-rotate"]').getBoundingClientRect().right > document.documentElement.clientWidth)
      .map((r) => r.dataset.id),
  );
  t.assert(cut.length === 0, `at 1024 px the actions of ${cut.join(', ')} are out of view`);
  t.assert((await t.api('DELETE', `/admin/v1/triggers/${retry}`)).status === 204, `delete ${retry}`);
}
