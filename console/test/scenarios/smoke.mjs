// Signing in and out: the gate in front of every page, the session held in
// an HttpOnly cookie and memory only, and the admin role a user needs.
export const name = 'signin';

// A JWT: three base64url parts, the first a JSON header ("eyJ").
const JWT = /eyJ[\w-]+\.[\w-]+\.[\w-]+/;

export default async function (t) {
  const { page } = t;

  // The console's headers: the CSP that keeps inline script out, and framing refused.
  const html = await t.api('GET', '/console/', null, { Authorization: null });
  t.assert(html.status === 200, `GET /console/: ${html.status}`);
  const csp = html.headers.get('content-security-policy') || '';
  for (const d of ["default-src 'none'", "script-src 'self'", "connect-src 'self'", "frame-ancestors 'none'"]) {
    t.assert(csp.includes(d), `GET /console/ CSP lacks ${d}: ${JSON.stringify(csp)}`);
  }
  t.assert(html.headers.get('x-frame-options') === 'DENY', `X-Frame-Options: ${html.headers.get('x-frame-options')}`);

  // / leads to the console, which without a session shows only the sign-in form.
  await page.goto(`${t.url}/`);
  t.assert(new URL(page.url()).pathname === '/console/', `/ went to ${page.url()}, want /console/`);
  await t.id('signin-form').waitFor();
  t.assert(!(await t.id('nav').isVisible()), 'the nav shows without a session');
  for (const route of ['#/data', '#/triggers', '#/access', '#/health']) {
    await page.goto('about:blank'); // a fresh load, as a bookmarked link is
    await page.goto(`${t.url}/console/${route}`);
    await t.id('signin-form').waitFor();
    t.assert(!(await t.id('nav').isVisible()), `the nav shows at ${route} without a session`);
  }
  await page.goto(`${t.url}/console/`);
  await t.shot('signin');

  // A wrong key is refused with the API's message.
  const wrong = await t.submitSignIn({ key: 'not-the-admin-key' });
  t.assert(wrong === 401, `a wrong key: status ${wrong}, want 401`);
  await t.id('signin-error').waitFor();
  t.assert(!(await t.id('nav').isVisible()), 'a wrong key shows the nav');

  // The admin key signs in, on the page the link named, and nothing the
  // page can read keeps a credential.
  await page.goto(`${t.url}/console/#/health`);
  await t.signIn();
  await t.expectText(t.id('nav-user'), 'admin');
  await t.id('page-health').waitFor();
  const stored = await page.evaluate(() => {
    const dump = (s) => Array.from({ length: s.length }, (_, i) => `${s.key(i)}=${s.getItem(s.key(i))}`).join('\n');
    return { local: dump(localStorage), session: dump(sessionStorage), cookie: document.cookie };
  });
  for (const [where, text] of Object.entries(stored)) {
    t.assert(!text.includes(t.adminKey), `the admin key is in ${where}`);
    t.assert(!JWT.test(text), `a token is in ${where}: ${text.slice(0, 200)}`);
  }
  t.assert(!stored.cookie.includes('loom_console'), `the session cookie is readable by the page: ${stored.cookie}`);
  // document.cookie above cannot see a cookie scoped to /admin/v1/console
  // anyway: the browser's own record says whether scripts could.
  const jar = (await t.context.cookies()).filter((c) => c.name === 'loom_console');
  t.assert(jar.length === 1 && jar[0].httpOnly && jar[0].sameSite === 'Strict', `the session cookie: ${JSON.stringify(jar)}`);
  // A refresh without the console header (a cross-site form could send the
  // cookie but not a custom header) is refused.
  const bare = await page.evaluate(async () => (await fetch('/admin/v1/console/refresh', { method: 'POST' })).status);
  t.assert(bare === 403, `refresh without X-Loom-Console: ${bare}, want 403`);

  // A reload signs in again through the cookie, without the form.
  await page.reload();
  await t.id('page-health').waitFor();
  await t.expectText(t.id('nav-user'), 'admin');

  // Sign-out ends the session on the server too: a reload shows the form.
  await t.id('nav-signout').click();
  await t.id('signin-form').waitFor();
  await page.reload();
  await t.id('signin-form').waitFor();
  t.assert(!(await t.id('nav').isVisible()), 'the nav shows after sign-out and reload');

  // A user without the admin role is refused; promoted, they get in.
  const username = 'console-smoke';
  const password = 'smoke-password-0123';
  const user = await t.signUp(username, password);

  const refused = await t.submitSignIn({ username, password });
  t.assert(refused === 403, `a user without the admin role: status ${refused}, want 403`);
  await t.expectText(t.id('signin-error'), 'admin role');
  t.assert(!(await t.id('nav').isVisible()), 'a user without the admin role shows the nav');

  const promote = await t.api('PUT', `/admin/v1/users/${encodeURIComponent(user.uid)}/roles`, { roles: ['user', 'admin'] });
  t.assert(promote.status === 200, `promote: ${promote.status} ${JSON.stringify(promote.body)}`);
  await t.signInUser(username, password);
  await t.expectText(t.id('nav-user'), username);

  await t.id('nav-signout').click();
  await t.id('signin-form').waitFor();
  // The cookie is gone or dead: the refresh a reload would make is refused.
  const after = await page.evaluate(async () => {
    const r = await fetch('/admin/v1/console/refresh', { method: 'POST', headers: { 'X-Loom-Console': '1' } });
    return r.status;
  });
  t.assert(after === 401, `refresh after sign-out: ${after}, want 401`);
}
