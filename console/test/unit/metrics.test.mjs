// Unit tests of the console's /metrics parser (src/metrics.js), run by
// `node --test test/unit/*.test.mjs` (console/unit_test.go runs them under go test).
// testdata/metrics.txt is GET /metrics of a real `loom serve` after an agent
// run, a few writes and one open SSE connection.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { parseMetrics, sum, sumBy, buckets, bucketDelta, quantile, quantileBound } from '../../src/metrics.js';

const captured = readFileSync(new URL('./testdata/metrics.txt', import.meta.url), 'utf8');

test('a real scrape: the numbers the Health page reads', () => {
  const m = parseMetrics(captured);
  assert.equal(sum(m, 'loom_changefeed_head_seq'), 76);
  assert.equal(sum(m, 'loom_sqlite_commit_seconds_count'), 132);
  assert.equal(sum(m, 'loom_sqlite_commit_seconds_sum'), 0.067969403);
  assert.equal(sum(m, 'loom_realtime_connections', { transport: 'sse' }), 1);
  assert.equal(sum(m, 'loom_realtime_connections', { transport: 'ws' }), null);
  assert.equal(sum(m, 'loom_realtime_subscriptions'), 1);
  assert.equal(sum(m, 'loom_webhook_outbox_scheduled'), 2);
  assert.deepEqual(sumBy(m, 'loom_webhook_attempts_total', 'outcome'), { delivered: 12 });
  assert.equal(sum(m, 'loom_webhook_attempts_total', { trigger: 'on-user-message', outcome: 'delivered' }), 2);
  assert.equal(sum(m, 'no_such_metric'), null);
  // Comments never become samples.
  for (const name of m.keys()) assert.ok(!name.startsWith('#'), name);
});

test('a real scrape: histogram buckets are cumulative and end at +Inf', () => {
  const m = parseMetrics(captured);
  const bs = buckets(m, 'loom_sqlite_commit_batch_requests');
  assert.ok(bs.length > 2);
  assert.equal(bs[bs.length - 1].le, Infinity);
  assert.equal(bs[bs.length - 1].count, sum(m, 'loom_sqlite_commit_batch_requests_count'));
  for (let i = 1; i < bs.length; i++) assert.ok(bs[i].count >= bs[i - 1].count);
  // 120 of the 132 commits were a batch of one request, the rest of two.
  assert.equal(bs[0].le, 1);
  assert.equal(bs[0].count, 120);
  assert.equal(quantileBound(0.5, bs), 1);
  assert.equal(quantileBound(0.95, bs), 2);
  assert.equal(quantile(0.5, bs), 0.55);
});

test('labels: escapes, spaces, empty values, several labels', () => {
  const m = parseMetrics(
    [
      '# HELP x_total A "quoted" help\\n with escapes.',
      '# TYPE x_total counter',
      'x_total{path="/a\\"b\\\\c\\nd",empty=""} 3',
      'x_total{ a = "1" , b="{,}" ,} 4 1700000000000',
      'y 1e3',
    ].join('\n'),
  );
  const xs = m.get('x_total');
  assert.equal(xs.length, 2);
  assert.deepEqual(xs[0].labels, { path: '/a"b\\c\nd', empty: '' });
  assert.equal(xs[0].value, 3);
  assert.deepEqual(xs[1].labels, { a: '1', b: '{,}' });
  assert.equal(xs[1].value, 4);
  assert.equal(sum(m, 'y'), 1000);
  assert.equal(m.size, 2);
});

test('values: +Inf, -Inf, NaN, negative, exponent', () => {
  const m = parseMetrics('a +Inf\nb -Inf\nc NaN\nd -1.5\ne 2.5e-3\n');
  assert.equal(sum(m, 'a'), Infinity);
  assert.equal(sum(m, 'b'), -Infinity);
  assert.ok(Number.isNaN(sum(m, 'c')));
  assert.equal(sum(m, 'd'), -1.5);
  assert.equal(sum(m, 'e'), 0.0025);
});

test('malformed lines are skipped, the rest still parses', () => {
  const m = parseMetrics('ok 1\n{nolabel} 2\nbad{a="1" 3\nnovalue\nworse abc\n9name 1\nok 2\r\n');
  assert.deepEqual([...m.keys()], ['ok']);
  assert.equal(sum(m, 'ok'), 3);
});

test('quantile: linear inside the bucket, +Inf falls back to the last bound', () => {
  const bs = [
    { le: 1, count: 10 },
    { le: 2, count: 20 },
    { le: 4, count: 40 },
    { le: Infinity, count: 40 },
  ];
  assert.equal(quantile(0.25, bs), 1);
  assert.equal(quantile(0.5, bs), 2);
  assert.equal(quantile(0.75, bs), 3);
  assert.equal(quantileBound(0.75, bs), 4);
  assert.equal(quantileBound(0.5, [{ le: 1, count: 1 }, { le: Infinity, count: 10 }]), Infinity);
  assert.equal(quantile(0.125, bs), 0.5);
  assert.equal(quantile(0.95, [{ le: 1, count: 1 }, { le: Infinity, count: 10 }]), 1);
  assert.equal(quantile(0.5, [{ le: 1, count: 0 }, { le: Infinity, count: 0 }]), null);
  assert.equal(quantile(0.5, null), null);
});

test('bucketDelta: observations between two scrapes', () => {
  const before = [{ le: 1, count: 5 }, { le: Infinity, count: 6 }];
  const now = [{ le: 1, count: 7 }, { le: Infinity, count: 10 }];
  assert.deepEqual(bucketDelta(now, before), [{ le: 1, count: 2 }, { le: Infinity, count: 4 }]);
  assert.equal(bucketDelta(now, null), now);
  assert.equal(bucketDelta(null, before), null);
});
