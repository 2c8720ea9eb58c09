// Access: a service key created (shown once, then listed without it) and
// revoked; the system key's extra confirmation; a user's roles set; a
// broken rules file refused on reload with the server's message while the
// old rules stay; the fixed file reloaded.
export const name = 'access';

export default async function (t) {
  const bob = await t.signUp('access-bob', 'correct horse battery');
  await t.signIn();
  await t.id('nav-access').click();

  // Service key: shown once.
  await t.id('key-name').fill('access-ci');
  await t.id('key-roles').fill('service, metrics');
  await t.id('key-create').click();
  const secret = (await t.id('secret-value').innerText()).trim();
  t.assert(secret.length >= 20, `the key is shown: ${JSON.stringify(secret)}`);
  await t.id('secret-close').click();
  await t.id('secret-once').waitFor({ state: 'detached' });
  await t.expectText(t.id('key-row-access-ci'), 'metrics');
  t.assert(!(await t.id('page-access').innerText()).includes(secret), 'the key is not shown again');
  const listed = await t.api('GET', '/admin/v1/keys');
  t.assert(!JSON.stringify(listed.body).includes(secret), 'the list API has no key');
  // It works until revoked.
  const use = (k) => t.api('GET', '/api/v1/databases/default/documents/access-none/x', null, { Authorization: null, 'X-API-Key': k });
  t.assert((await use(secret)).status !== 401, 'the new key authenticates');
  await t.id('key-revoke-access-ci').click();
  await t.id('key-revoke-confirm').click();
  await t.eventually(async () => (await t.id('key-row-access-ci').count()) === 0, { what: 'the revoked key to leave the list' });
  t.assert((await use(secret)).status === 401, 'the revoked key is refused');

  // A key that stays (for the page's screenshot and later scenarios).
  await t.id('key-name').fill('access-reporting');
  await t.id('key-roles').fill('metrics');
  await t.id('key-create').click();
  await t.id('secret-close').click();
  await t.expectText(t.id('key-row-access-reporting'), 'metrics');

  // Loom's own key needs a second confirmation; cancel it.
  await t.id('key-revoke-loom-agents').click();
  t.assert(await t.id('key-revoke-confirm').isDisabled(), 'revoking a system key waits for the acknowledgement');
  await t.id('key-revoke-system-ack').check();
  t.assert(await t.id('key-revoke-confirm').isEnabled(), 'acknowledged');
  await t.id('key-revoke-cancel').click();
  await t.expectText(t.id('key-row-loom-agents'), 'system');

  // Roles.
  await t.id('users-prefix').fill('access-bob');
  await t.id('user-edit-access-bob').click();
  await t.id('user-roles-input').fill('x'.repeat(65));
  await t.id('user-roles-save').click();
  await t.id('user-roles-error').waitFor();
  await t.id('user-roles-input').fill('user, auditor');
  await t.id('user-roles-save').click();
  await t.expectText(t.id('user-row-access-bob'), 'auditor');
  const users = await t.api('GET', '/admin/v1/users?prefix=access-bob');
  const u = users.body.users.find((x) => x.uid === bob.uid);
  t.assert(u && u.roles.join(',') === 'user,auditor', `roles stored: ${JSON.stringify(users.body)}`);

  // Rules: a broken file is refused and the old rules stay.
  const before = (await t.api('GET', '/admin/v1/rules')).body;
  t.assert(before.file === t.rulesFile, `rules file ${before.file}`);
  await t.expectText(t.id('rules-count'), String(before.rules));
  await t.writeRules('[[rule]]\nmatch = "access/{id}"\nallow = ["fly"]\nif = "true"\n');
  await t.id('rules-reload').click();
  await t.expectText(t.id('rules-error'), 'the previous rules stay in force');
  const refused = (await t.api('POST', '/admin/v1/rules/reload')).body.message;
  await t.expectText(t.id('rules-error'), refused);
  await t.expectText(t.id('rules-count'), String(before.rules));
  await t.expectText(t.id('rules-source'), 'fly');
  await t.expectText(t.id('rules-last'), 'failed');
  await t.writeRules(before.source);
  await t.id('rules-reload').click();
  await t.expectText(t.id('rules-ok'), `Reloaded: ${before.rules} rules`);
  t.assert((await t.id('rules-error').count()) === 0, 'the error is gone');
  await t.expectText(t.id('rules-last'), 'ok');
  await t.page.evaluate(() => window.scrollTo(0, 0));
  await t.shot('access');
}
