// Hash routing: /console/#/<page>/<part>/<part>?<params>. The server serves
// one index.html, so no path needs a server-side fallback.
import { signal } from '@preact/signals';

// A malformed escape (a hand-edited link: #/data/%E0) is kept as typed
// rather than throwing, which would leave the console blank.
function decode(part) {
  try {
    return decodeURIComponent(part);
  } catch {
    return part;
  }
}

function parse() {
  const raw = location.hash.replace(/^#\/?/, '');
  const [path, qs = ''] = raw.split('?');
  const parts = path.split('/').filter(Boolean).map(decode);
  return { page: parts[0] || 'data', parts: parts.slice(1), params: new URLSearchParams(qs) };
}

/** The current route: {page, parts, params}. */
export const route = signal(parse());
addEventListener('hashchange', () => {
  const prev = route.value;
  route.value = parse();
  // Another page or path starts at the top (a link low in a long table
  // would otherwise open the next view scrolled to its end); a change of
  // the query parameters alone (a filter) keeps the place.
  const next = route.value;
  if (prev.page !== next.page || prev.parts.join('/') !== next.parts.join('/')) scrollTo(0, 0);
});

/** The hash link of a page and its parts (each part URL-encoded). */
export function href(page, ...parts) {
  const last = parts.length && typeof parts[parts.length - 1] === 'object' ? parts.pop() : null;
  let h = `#/${[page, ...parts.filter((p) => p !== undefined && p !== '')].map(encodeURIComponent).join('/')}`;
  if (last) {
    const qs = new URLSearchParams(Object.entries(last).filter(([, v]) => v !== undefined && v !== null && v !== '')).toString();
    if (qs) h += `?${qs}`;
  }
  return h;
}

export function navigate(page, ...parts) {
  location.hash = href(page, ...parts);
}
