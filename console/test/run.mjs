// Runs the console's browser scenarios (scenarios/*.mjs, in file-name
// order) in one headless Chromium, each in a fresh browser context, against
// the node console/browser_test.go started. Exits 1 when any fails.
// LOOM_SCENARIOS=a,b runs only the scenarios with those names or file names.
import { chromium } from 'playwright-core';
import { readdirSync } from 'node:fs';
import { dirname, join, basename } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { harnessEnv, makeT, readRules } from './lib.mjs';

const SCENARIO_TIMEOUT = 60_000;
// Every Playwright action and wait defaults to this, well inside the
// scenario's budget, so a missing element fails with its own message.
const ACTION_TIMEOUT = 10_000;

const here = dirname(fileURLToPath(import.meta.url));
const env = harnessEnv();

async function loadScenarios() {
  const dir = join(here, 'scenarios');
  const files = readdirSync(dir).filter((f) => f.endsWith('.mjs')).sort();
  const all = [];
  for (const f of files) {
    const mod = await import(pathToFileURL(join(dir, f)).href);
    if (typeof mod.default !== 'function') throw new Error(`scenarios/${f}: no default export function`);
    all.push({ file: basename(f, '.mjs'), name: mod.name || basename(f, '.mjs'), run: mod.default });
  }
  const only = (process.env.LOOM_SCENARIOS || '').split(',').map((s) => s.trim()).filter(Boolean);
  if (only.length === 0) return all;
  const unknown = only.filter((o) => !all.some((s) => s.name === o || s.file === o));
  if (unknown.length) throw new Error(`LOOM_SCENARIOS names no scenario: ${unknown.join(', ')} (have: ${all.map((s) => s.name).join(', ')})`);
  return all.filter((s) => only.includes(s.name) || only.includes(s.file));
}

// watch records what a page reports that a scenario did not ask for:
// console errors and failed requests are reported; a CSP violation or an
// uncaught exception fails the scenario.
function watch(page, problems) {
  page.on('console', (msg) => {
    if (msg.type() !== 'error') return;
    const at = msg.location()?.url;
    const text = at && !msg.text().includes(at) ? `${msg.text()} (${at})` : msg.text();
    const fatal = /Content Security Policy/i.test(text);
    problems.push({ fatal, text: `${fatal ? 'CSP violation' : 'console error'}: ${text}` });
  });
  page.on('pageerror', (err) => problems.push({ fatal: true, text: `uncaught page error: ${err.stack || err.message}` }));
  page.on('requestfailed', (req) => {
    problems.push({ fatal: false, text: `request failed: ${req.method()} ${req.url()}: ${req.failure()?.errorText}` });
  });
  page.on('response', (res) => {
    if (res.status() >= 500) problems.push({ fatal: false, text: `server error: ${res.status()} ${res.request().method()} ${res.url()}` });
  });
}

// isolate puts back what one scenario may have changed for the next: the
// receiver answers 200 and the rules file holds (and the node runs) the
// original rules.
async function isolate(t, rules) {
  await t.receiver.setStatus(200);
  if (readRules(env) !== rules) {
    t.writeRules(rules);
    const r = await t.api('POST', '/admin/v1/rules/reload');
    if (r.status !== 200) throw new Error(`restoring the rules: ${r.status} ${JSON.stringify(r.body)}`);
  }
}

async function runOne(browser, s, rules) {
  const context = await browser.newContext({ viewport: { width: 1280, height: 800 }, deviceScaleFactor: 1 });
  context.setDefaultTimeout(ACTION_TIMEOUT);
  const problems = [];
  context.on('page', (p) => watch(p, problems));
  const page = await context.newPage();
  const t = makeT({ env, context, page, name: s.name });
  let timer;
  const started = Date.now();
  let error = null;
  try {
    await Promise.race([
      // The reset is inside the scenario's time: a hung reload fails it too.
      isolate(t, rules).then(() => s.run(t)),
      new Promise((_, reject) => {
        timer = setTimeout(() => reject(new Error(`timed out after ${SCENARIO_TIMEOUT / 1000} s`)), SCENARIO_TIMEOUT);
      }),
    ]);
    if (problems.some((p) => p.fatal)) error = new Error('the page reported a CSP violation or an uncaught error (below)');
  } catch (err) {
    error = err;
  } finally {
    clearTimeout(timer);
  }
  let where = '';
  if (error) {
    // Where the page was and what it showed: most failures explain themselves from this.
    where = await Promise.race([
      page
        .evaluate(() => `${location.href}\n${document.body ? document.body.innerText.slice(0, 800) : ''}`)
        .then((s) => `page at ${s}`)
        .catch((err) => `page unreadable: ${err.message}`),
      new Promise((r) => setTimeout(() => r('page unreadable: timed out'), 2000)),
    ]);
  }
  await context.close().catch(() => {});
  return { error, problems, where, ms: Date.now() - started };
}

const scenarios = await loadScenarios();
const browser = await chromium.launch({
  executablePath: env.chromium,
  headless: true,
  // Without these Chromium keeps reaching for the network (updates, sync,
  // QUIC probes), which is slow and noisy on machines without it.
  args: [
    '--no-sandbox',
    '--disable-gpu',
    '--disable-quic',
    '--no-first-run',
    '--disable-background-networking',
    '--disable-component-update',
    '--disable-sync',
  ],
});
console.log(`chromium ${browser.version()} at ${env.chromium}; ${scenarios.length} scenario(s) against ${env.url}`);

const rules = readRules(env);
let failed = 0;
try {
  for (const s of scenarios) {
    const r = await runOne(browser, s, rules);
    const secs = (r.ms / 1000).toFixed(1);
    if (r.error) {
      failed++;
      console.log(`FAIL ${s.name} (${secs} s): ${r.error.stack || r.error}`);
      console.log(`  ${r.where.replace(/\n/g, '\n  | ')}`);
    } else {
      console.log(`ok ${s.name} (${secs} s)`);
    }
    for (const p of r.problems) console.log(`  ${p.text}`);
  }
} finally {
  await browser.close();
}
console.log(`${scenarios.length - failed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
