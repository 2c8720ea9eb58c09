// The Data and Query pages: browse the tree to a collection, page it,
// create a document, edit it while the API changes it (412 → conflict
// panel → reload → save), delete it, then query a collection group with a
// filter and an order, page the results, and show a bad query's error.
export const name = 'data';

const DB = '/api/v1/databases/default';
const R1 = 120; // rooms/r1/messages: 50 + 50 + 20 on the Data page
const R2 = 30;

const pad = (i) => String(i).padStart(3, '0');
const message = (room, i) => ({
  type: 'create',
  path: `rooms/${room}/messages/m${pad(i)}`,
  data: { text: `hello ${i}`, n: i, author: i % 2 ? 'ann' : 'bob' },
});

export default async function (t) {
  const { page } = t;
  const id = (s) => page.getByTestId(s);

  const writes = [
    { type: 'create', path: 'rooms/r1', data: { title: 'Room one' } },
    { type: 'create', path: 'rooms/r2', data: { title: 'Room two' } },
    ...Array.from({ length: R1 }, (_, i) => message('r1', i)),
    ...Array.from({ length: R2 }, (_, i) => message('r2', i)),
  ];
  const seeded = await t.api('POST', `${DB}/batch`, { writes });
  t.assert(seeded.status === 200, `seeding answered ${seeded.status}: ${JSON.stringify(seeded.body)}`);

  await t.signIn();
  await id('nav-data').click();

  // The tree: default → rooms → r1 → messages (each level loads when opened).
  await id('tree-db-default').click();
  await id('db-collection-rooms').waitFor();
  await id('db-group-rooms/*/messages').waitFor();
  await id('tree-rooms').click();
  await id('collection-view').waitFor();
  await id('doc-row-rooms/r1').waitFor(); // other scenarios' rooms may be listed too
  await id('tree-rooms/r1').click();
  await id('tree-rooms/r1/messages').click();
  await t.expectText(id('data-crumbs'), 'default / rooms / r1 / messages');

  // Three pages of 50, 50 and 20.
  const rows = page.locator('[data-testid^="doc-row-"]');
  await t.eventually(async () => (await rows.count()) === 50, { what: 'the first page of 50 documents' });
  await id('docs-more').click();
  await t.eventually(async () => (await rows.count()) === 100, { what: 'the second page' });
  await id('docs-more').click();
  await t.eventually(async () => (await rows.count()) === R1, { what: 'the third page' });
  await t.expectText(id('docs-count'), `${R1} shown`);
  t.assert((await id('docs-more').count()) === 0, 'no More button after the last page');

  // A link at the end of a long table opens the document at the top of the
  // page, not scrolled down where the table ended.
  const last = id(`doc-row-rooms/r1/messages/m${pad(R1 - 1)}`).locator('a');
  await last.scrollIntoViewIfNeeded();
  t.assert((await page.evaluate(() => scrollY)) > 0, 'the table is scrolled down');
  await last.click();
  await id('document-view').waitFor();
  await t.eventually(async () => (await page.evaluate(() => scrollY)) === 0, { what: 'the document opens at the top' });
  await page.goBack();
  await id('collection-view').waitFor();

  // The chosen order survives opening a document and coming Back.
  await id('docs-order').selectOption('createdAt:desc');
  await t.eventually(async () => new URL(page.url()).hash.endsWith('?order=createdAt%3Adesc'), { what: 'the order in the route' });
  await t.eventually(async () => (await rows.count()) === 50, { what: 'the first page in that order' });
  await rows.first().locator('a').click();
  await id('document-view').waitFor();
  await page.goBack();
  await id('collection-view').waitFor();
  t.assert((await id('docs-order').inputValue()) === 'createdAt:desc', 'the order after Back');
  await id('docs-order').selectOption('');
  await t.eventually(async () => !new URL(page.url()).hash.includes('order='), { what: 'ID order again' });

  // Create: invalid JSON is flagged as you type and cannot be submitted.
  await id('new-doc').click();
  await id('new-doc-id').fill('hello-console');
  await id('new-doc-json').fill('{"text": ');
  await id('new-doc-json-error').waitFor();
  t.assert(await id('new-doc-submit').isDisabled(), 'Create is disabled while the JSON does not parse');
  // An integer beyond 2^53 would be stored rounded: the form says so.
  await id('new-doc-json').fill('{"big": 12345678901234567890}');
  await id('new-doc-json-lossy').waitFor();
  await id('new-doc-json').fill('{"text": "first", "n": 1}');
  // The warning goes once the text holds only small numbers.
  await id('new-doc-json-lossy').waitFor({ state: 'detached' });
  await id('new-doc-submit').click();
  const path = 'rooms/r1/messages/hello-console';
  await id('document-view').waitFor();
  await t.expectText(id('doc-version'), '1');
  await t.eventually(async () => (await page.evaluate(() => location.hash)) === '#/data/default/rooms/r1/messages/hello-console', {
    what: 'the new document opens',
  });

  // Edit while someone else changes it: the save is refused with 412.
  await id('doc-editor').fill('{"text": "mine", "n": 2}');
  const patched = await t.api('PATCH', `${DB}/documents/${path}`, { doc: { text: 'theirs', extra: true } });
  t.assert(patched.status === 200, `PATCH answered ${patched.status}`);
  await id('doc-save').click();
  await id('doc-conflict').waitFor();
  await t.expectText(id('conflict-version'), '2');
  await t.expectText(id('conflict-status'), '412');
  await t.expectText(id('conflict-current'), 'theirs');
  await t.expectText(id('conflict-mine'), 'mine');
  await id('doc-conflict').scrollIntoViewIfNeeded();
  await t.shot('data-conflict');

  // Reload current, edit again, save: version 3.
  await id('conflict-reload').click();
  await id('doc-conflict').waitFor({ state: 'detached' });
  t.assert((await id('doc-editor').inputValue()).includes('theirs'), 'the editor holds the current document');
  await t.expectText(id('doc-version'), '2');
  await id('doc-editor').fill('{"text": "merged", "n": 3, "extra": true}');
  await id('doc-save').click();
  await t.expectText(id('doc-notice'), 'version 3');
  await t.expectText(id('doc-version'), '3');
  const saved = await t.api('GET', `${DB}/documents/${path}`);
  t.assert(saved.status === 200 && saved.body.version === 3 && saved.body.text === 'merged', `stored: ${JSON.stringify(saved.body)}`);
  await t.shot('data');

  // Delete, with a confirmation step: back to the collection, and gone.
  await id('doc-delete').click();
  await id('doc-delete-confirm').click();
  await id('collection-view').waitFor();
  await t.expectText(id('data-crumbs'), 'default / rooms / r1 / messages');
  const gone = await t.api('GET', `${DB}/documents/${path}`);
  t.assert(gone.status === 404, `after delete GET answered ${gone.status}`);

  // The collection group opens on the Query page and runs.
  await id('tree-groups-default').click();
  await id('tree-group-rooms/*/messages').click();
  await id('page-query').waitFor();
  t.assert((await id('query-collection').inputValue()) === 'rooms/*/messages', 'the pattern is prefilled');
  await t.expectText(id('query-count'), '50 documents');

  // author == "ann" (plain text is sent as a string), newest n first, 20 a page.
  await id('filter-add').click();
  await id('filter-field-0').fill('author');
  await id('filter-value-0').fill('ann');
  await t.expectText(id('filter-kind-0'), 'string');
  await id('order-add').click();
  await id('order-field-0').fill('n');
  await id('order-dir-0').selectOption('desc');
  await id('query-limit').fill('20');
  await id('query-run').click();
  const results = page.locator('[data-testid^="query-row-"]');
  await t.eventually(async () => (await results.count()) === 20, { what: '20 results' });
  const first = await results.first().getAttribute('data-testid');
  t.assert(first === 'query-row-rooms/r1/messages/m119', `first result ${first}`);
  const ann = R1 / 2 + R2 / 2;
  for (let n = 40; n < ann; n += 20) {
    await id('query-more').click();
    await t.eventually(async () => (await results.count()) === n, { what: `${n} results` });
  }
  await id('query-more').click();
  await t.eventually(async () => (await results.count()) === ann, { what: `all ${ann} results` });
  t.assert((await id('query-more').count()) === 0, 'no More after the last page');
  await page.evaluate(() => scrollTo(0, 0));
  await t.shot('query');
  await id('query-curl-toggle').click();
  await t.expectText(id('query-curl-text'), '"op":"=="');
  t.assert(!(await id('query-curl-text').textContent()).includes(t.adminKey), 'the curl line never holds a credential');

  // A bad query: "in" needs an array; the API's error shows inline.
  await id('filter-op-0').selectOption('in');
  await id('query-run').click();
  await t.expectText(id('query-error'), 'INVALID_QUERY');

  // A result row opens its document on the Data page.
  await id('filter-op-0').selectOption('==');
  await id('query-run').click();
  await id('query-row-rooms/r1/messages/m117').click();
  await id('document-view').waitFor();
  await t.expectText(id('data-crumbs'), 'default / rooms / r1 / messages / m117');
  await t.expectText(id('doc-version'), '1');
  t.assert((await id('doc-editor').inputValue()).includes('hello 117'), 'the clicked document opens');

  // Back from the document: the same query, filled in and run again.
  await page.goBack();
  await id('page-query').waitFor();
  await t.eventually(async () => (await results.count()) === 20, { what: 'the query again after Back' });
  t.assert((await id('query-collection').inputValue()) === 'rooms/*/messages', 'the pattern after Back');
  t.assert((await id('filter-field-0').inputValue()) === 'author' && (await id('filter-value-0').inputValue()) === 'ann', 'the filter after Back');
  t.assert((await id('order-dir-0').inputValue()) === 'desc' && (await id('query-limit').inputValue()) === '20', 'the order and limit after Back');

  // A database name from the route stays inside the curl line's quotes
  // (encodeURIComponent leaves ' as it is).
  await page.goto(`${t.url}/console/#/query/it's?collection=x`);
  await id('query-form').waitFor();
  await id('query-curl-toggle').click();
  const curl = await id('query-curl-text').textContent();
  t.assert(curl.includes(`/databases/it'\\''s/query'`), `the database name breaks the curl line's quoting: ${curl}`);
}
