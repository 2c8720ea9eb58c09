// The console's only door to the server: the session (a short-lived access
// token held in memory, re-minted from an HttpOnly cookie the page cannot
// read) and a fetch wrapper that turns error bodies into ApiError.
//
// Nothing here touches localStorage or sessionStorage: a reload signs in
// again through POST /admin/v1/console/refresh, which only the cookie opens.
import { signal } from '@preact/signals';

const SESSION = '/admin/v1/console';
const CSRF = { 'X-Loom-Console': '1' };

/** The signed-in console user ({username, roles}) or null. */
export const session = signal(null);
/** True until the first refresh attempt after page load has answered. */
export const booting = signal(true);

let token = null;
let refreshTimer = null;
let refreshing = null;
// Bumped when a session ends or a new one starts: a refresh that answers
// after a sign-out must not bring the session back, and one that fails
// after a new sign-in must not end the new session.
let epoch = 0;
const tokenListeners = new Set();

/** The current access token (for the realtime client), or null. */
export function currentToken() {
  return token;
}

/** Calls fn(token) whenever a new token is minted; returns the unsubscriber. */
export function onToken(fn) {
  tokenListeners.add(fn);
  return () => tokenListeners.delete(fn);
}

/** An error answer: status, the API's code and message, and its details. */
export class ApiError extends Error {
  constructor(status, body) {
    const b = body && typeof body === 'object' ? body : {};
    super(b.message || `HTTP ${status}`);
    this.status = status;
    // Under [compat] syntrix the code is renamed and Loom's is in details.code.
    this.code = (b.details && b.details.code) || b.code || '';
    this.details = b.details || null;
    this.body = body;
  }
}

async function parse(res) {
  const text = await res.text();
  if (!text) return null;
  try {
    return JSON.parse(text);
  } catch {
    return text;
  }
}

function adopt(body) {
  token = body.access_token;
  session.value = { username: body.username, roles: body.roles || [] };
  clearTimeout(refreshTimer);
  // Refresh a minute before expiry (or at 80% of a short lifetime).
  const ttl = Number(body.expires_in) || 600;
  const lead = Math.min(60, ttl * 0.2);
  refreshTimer = setTimeout(() => refresh().catch(() => {}), (ttl - lead) * 1000);
  for (const fn of tokenListeners) fn(token);
}

function drop() {
  epoch++;
  token = null;
  clearTimeout(refreshTimer);
  session.value = null;
  for (const fn of tokenListeners) fn(null);
}

async function post(path, body, headers = {}) {
  const res = await fetch(path, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json', ...headers },
    body: body === undefined ? undefined : JSON.stringify(body),
    credentials: 'same-origin',
  });
  const parsed = await parse(res);
  if (!res.ok) throw new ApiError(res.status, parsed);
  return parsed;
}

/** Signs in with {adminKey} or {username, password}. Throws ApiError. */
export async function signIn(credentials) {
  const body = await post(`${SESSION}/session`, credentials);
  epoch++;
  adopt(body);
}

/**
 * Mints a new access token from the session cookie. Concurrent callers share
 * one request (the cookie is one-use: two refreshes would revoke it).
 */
export function refresh() {
  if (!refreshing) {
    const e = epoch;
    refreshing = post(`${SESSION}/refresh`, undefined, CSRF)
      .then(
        (body) => {
          if (e === epoch) adopt(body);
        },
        (err) => {
          if (e === epoch) drop();
          throw err;
        },
      )
      .finally(() => {
        refreshing = null;
      });
  }
  return refreshing;
}

/** Resumes the session of a reloaded page, if the cookie still holds one. */
export async function resume() {
  try {
    await refresh();
  } catch {
    // No session: the sign-in screen shows.
  } finally {
    booting.value = false;
  }
}

export async function signOut() {
  try {
    await post(`${SESSION}/logout`, undefined, CSRF);
  } finally {
    drop();
  }
}

/**
 * Calls the API as the console user. Resolves {status, headers, body} for a
 * 2xx answer; throws ApiError otherwise. A 401 refreshes the token once and
 * retries (a failed refresh ends the session); a second 401 is thrown. A 401
 * for a token another request has already replaced retries with the new one
 * without minting another (concurrent 401s share one refresh).
 */
export async function request(method, path, { body, headers = {}, retried = false } = {}) {
  const h = { ...headers };
  const sent = token;
  if (sent) h.Authorization = `Bearer ${sent}`;
  if (body !== undefined) h['Content-Type'] = 'application/json';
  const res = await fetch(path, {
    method,
    headers: h,
    body: body === undefined ? undefined : JSON.stringify(body),
    credentials: 'omit',
  });
  if (res.status === 401 && !retried && token) {
    if (token === sent) await refresh();
    return request(method, path, { body, headers, retried: true });
  }
  const parsed = await parse(res);
  if (!res.ok) throw new ApiError(res.status, parsed);
  return { status: res.status, headers: res.headers, body: parsed };
}

export const api = {
  get: (path, opts) => request('GET', path, opts),
  post: (path, body, opts) => request('POST', path, { ...opts, body }),
  put: (path, body, opts) => request('PUT', path, { ...opts, body }),
  patch: (path, body, opts) => request('PATCH', path, { ...opts, body }),
  del: (path, opts) => request('DELETE', path, opts),
};

/** The URL of a database's documents API for a collection or document path. */
export function docURL(db, path) {
  return `/api/v1/databases/${encodeURIComponent(db)}/documents/${path.split('/').map(encodeURIComponent).join('/')}`;
}

/** The URL of a database's query endpoint. */
export function queryURL(db) {
  return `/api/v1/databases/${encodeURIComponent(db)}/query`;
}

/**
 * A page of documents from a listing or query answer: {docs, nextCursor}
 * normally, a bare array with X-Next-Cursor under [compat] syntrix.
 */
export function pageOf(res) {
  if (Array.isArray(res.body)) {
    return { docs: res.body, nextCursor: res.headers.get('X-Next-Cursor') || null };
  }
  return { docs: res.body.docs || [], nextCursor: res.body.nextCursor || null };
}
