// A small parser for the Prometheus text exposition format (version 0.0.4),
// the format of GET /metrics, and the few sums the Health page derives from
// it. Comments (# HELP, # TYPE) carry nothing the page needs and are skipped.

/**
 * Parses exposition text into a Map name → [{labels, value}]. A sample line
 * is `name{label="value",…} value [timestamp]`; label values may hold
 * escapes (\\, \", \n); values may be +Inf, -Inf or NaN. A line that is not
 * a sample is skipped rather than failing the whole scrape.
 */
export function parseMetrics(text) {
  const out = new Map();
  for (const raw of String(text).split('\n')) {
    const line = raw.trim();
    if (line === '' || line.startsWith('#')) continue;
    const s = parseLine(line);
    if (!s) continue;
    let list = out.get(s.name);
    if (!list) out.set(s.name, (list = []));
    list.push({ labels: s.labels, value: s.value });
  }
  return out;
}

const NAME = /^[a-zA-Z_:][a-zA-Z0-9_:]*/;
const LABEL = /^[a-zA-Z_][a-zA-Z0-9_]*/;

function parseLine(line) {
  const m = NAME.exec(line);
  if (!m) return null;
  const name = m[0];
  let i = name.length;
  const labels = {};
  if (line[i] === '{') {
    i++;
    for (;;) {
      while (line[i] === ' ' || line[i] === ',') i++;
      if (line[i] === '}') {
        i++;
        break;
      }
      const l = LABEL.exec(line.slice(i));
      if (!l) return null;
      i += l[0].length;
      while (line[i] === ' ') i++;
      if (line[i] !== '=') return null;
      i++;
      while (line[i] === ' ') i++;
      if (line[i] !== '"') return null;
      i++;
      let v = '';
      for (;;) {
        const c = line[i];
        if (c === undefined) return null;
        i++;
        if (c === '"') break;
        if (c === '\\') {
          const e = line[i++];
          v += e === 'n' ? '\n' : e;
        } else v += c;
      }
      labels[l[0]] = v;
    }
  }
  const rest = line.slice(i).trim().split(/\s+/);
  const value = parseValue(rest[0]);
  if (value === null) return null;
  return { name, labels, value };
}

function parseValue(s) {
  if (s === undefined || s === '') return null;
  if (s === '+Inf' || s === 'Inf') return Infinity;
  if (s === '-Inf') return -Infinity;
  if (s === 'NaN') return NaN;
  const n = Number(s);
  return Number.isNaN(n) ? null : n;
}

function matches(labels, want) {
  for (const [k, v] of Object.entries(want || {})) if (labels[k] !== v) return false;
  return true;
}

/** The sum of a metric's samples whose labels match `want`; null when absent. */
export function sum(metrics, name, want) {
  const list = metrics.get(name);
  if (!list) return null;
  let total = 0;
  let found = false;
  for (const s of list) {
    if (matches(s.labels, want)) {
      total += s.value;
      found = true;
    }
  }
  return found ? total : null;
}

/** Sums of a metric by one label: {labelValue: sum}. */
export function sumBy(metrics, name, label) {
  const out = {};
  for (const s of metrics.get(name) || []) {
    const k = s.labels[label] ?? '';
    out[k] = (out[k] || 0) + s.value;
  }
  return out;
}

/**
 * A histogram's cumulative buckets summed over its series: [{le, count}]
 * sorted by le (the +Inf bucket last), or null when absent.
 */
export function buckets(metrics, name) {
  const list = metrics.get(`${name}_bucket`);
  if (!list) return null;
  const by = new Map();
  for (const s of list) {
    const le = parseValue(s.labels.le);
    if (le === null || Number.isNaN(le)) continue;
    by.set(le, (by.get(le) || 0) + s.value);
  }
  return [...by.entries()].sort((a, b) => a[0] - b[0]).map(([le, count]) => ({ le, count }));
}

/** Bucket counts minus an earlier scrape's (the observations in between). */
export function bucketDelta(now, before) {
  if (!now) return null;
  if (!before) return now;
  const old = new Map(before.map((b) => [b.le, b.count]));
  return now.map((b) => ({ le: b.le, count: b.count - (old.get(b.le) || 0) }));
}

/**
 * Estimates the q-quantile (0..1) from cumulative buckets the way
 * Prometheus' histogram_quantile does: linear inside the bucket that holds
 * the rank, the upper bound of the last finite bucket when the rank falls
 * in +Inf. null when there are no observations.
 */
export function quantile(q, bs) {
  if (!bs || bs.length === 0) return null;
  const total = bs[bs.length - 1].count;
  if (!(total > 0)) return null;
  const rank = q * total;
  let prevLe = 0;
  let prevCount = 0;
  for (const b of bs) {
    if (b.count >= rank) {
      if (b.le === Infinity) return prevLe;
      if (b.count === prevCount) return b.le;
      return prevLe + ((b.le - prevLe) * (rank - prevCount)) / (b.count - prevCount);
    }
    prevLe = b.le;
    prevCount = b.count;
  }
  return prevLe;
}

/**
 * The upper bound of the bucket that holds the q-quantile: "at most this"
 * (Infinity when it is past the last finite bound). Whole-number
 * observations such as batch sizes read better this way than interpolated.
 */
export function quantileBound(q, bs) {
  if (!bs || bs.length === 0) return null;
  const total = bs[bs.length - 1].count;
  if (!(total > 0)) return null;
  const rank = q * total;
  for (const b of bs) if (b.count >= rank) return b.le;
  return Infinity;
}
