// The console's realtime client: the same WebSocket API apps use
// (GET /realtime/ws, README "Realtime"). One connection per database is
// shared by every subscription on the page. A new access token is sent as an
// `auth` message before the old one expires, so streams survive refreshes; a
// dropped connection reconnects and resubscribes from each subscription's
// last resumeToken, so no change is missed or repeated.
import { currentToken, onToken } from './api.js';

const conns = new Map(); // database → Conn
let nextId = 1;

class Conn {
  constructor(db) {
    this.db = db;
    this.subs = new Map(); // id → {query, sendSnapshot, resumeToken, onMessage, onStatus}
    this.ws = null;
    this.authed = false;
    this.retry = 500;
    this.timer = null;
    this.offToken = onToken((tok) => {
      if (!tok) return this.close();
      if (this.ws && this.ws.readyState === WebSocket.OPEN) this.send({ type: 'auth', payload: { token: tok, database: this.db } });
    });
    this.open();
  }

  open() {
    const tok = currentToken();
    if (!tok) return;
    const proto = location.protocol === 'https:' ? 'wss:' : 'ws:';
    const ws = new WebSocket(`${proto}//${location.host}/realtime/ws`);
    this.ws = ws;
    this.authed = false;
    ws.onopen = () => {
      this.send({ type: 'auth', payload: { token: currentToken(), database: this.db } });
    };
    ws.onmessage = (e) => {
      let msg;
      try {
        msg = JSON.parse(e.data);
      } catch {
        return; // not a message of the protocol
      }
      this.receive(msg);
    };
    ws.onclose = () => {
      if (this.ws !== ws) return;
      this.ws = null;
      for (const s of this.subs.values()) s.onStatus?.('reconnecting');
      if (this.subs.size > 0) {
        this.timer = setTimeout(() => this.open(), this.retry);
        this.retry = Math.min(this.retry * 2, 10000);
      }
    };
  }

  send(msg) {
    if (this.ws && this.ws.readyState === WebSocket.OPEN) this.ws.send(JSON.stringify(msg));
  }

  subscribe(id, s) {
    const payload = { query: s.query, sendSnapshot: s.sendSnapshot && !s.resumeToken };
    if (s.resumeToken) payload.resumeToken = s.resumeToken;
    this.send({ id, type: 'subscribe', payload });
  }

  receive(msg) {
    const p = msg.payload || {};
    if (msg.type === 'auth_ack') {
      if (!this.authed) {
        this.authed = true;
        // Only an accepted connection resets the backoff: a server that
        // opens the socket and closes it at once is not hammered every 500 ms.
        this.retry = 500;
        // A subscription the server ended stays ended: its page has the error.
        for (const [id, s] of this.subs) if (!s.ended) this.subscribe(id, s);
      }
      return;
    }
    if (msg.type === 'ping') return this.send({ type: 'pong' });
    const id = p.subId || msg.id;
    const s = id && this.subs.get(id);
    if (!s) {
      if (msg.type === 'error' && !id) for (const x of this.subs.values()) x.onMessage(msg);
      return;
    }
    if (p.resumeToken) s.resumeToken = p.resumeToken;
    if (msg.type === 'subscribe_ack') s.onStatus?.('live');
    if (msg.type === 'error' && p.code === 'SLOW_CONSUMER') {
      // Fell behind: resubscribe from the last token we were given.
      this.subscribe(id, s);
      return;
    }
    // Any other error or a reset ends the subscription on the server: an
    // unsubscribe would be answered NOT_FOUND and count as a bad message.
    if (msg.type === 'error' || msg.type === 'reset') s.ended = true;
    s.onMessage(msg);
  }

  add(s) {
    const id = `c${nextId++}`;
    this.subs.set(id, s);
    if (this.authed) this.subscribe(id, s);
    else if (!this.ws) this.open();
    return id;
  }

  remove(id) {
    const s = this.subs.get(id);
    if (!s) return;
    this.subs.delete(id);
    if (!s.ended) this.send({ type: 'unsubscribe', payload: { id } });
    if (this.subs.size === 0) this.close();
  }

  close() {
    clearTimeout(this.timer);
    this.offToken();
    // A conn closed by a sign-out is still removed from by its pages later:
    // it must not drop a newer conn of the same database from the map.
    if (conns.get(this.db) === this) conns.delete(this.db);
    const ws = this.ws;
    this.ws = null;
    ws?.close();
  }
}

/**
 * Subscribes to a query on a database: onMessage receives every `snapshot`,
 * `event`, `reset` and `error` message of the subscription (README,
 * "Realtime"); onStatus 'live' | 'reconnecting'. Returns the unsubscriber.
 *
 *   subscribe({database: 'default', query: {collection: 'rooms/*\/messages'}, sendSnapshot: true}, msg => …)
 */
export function subscribe({ database = 'default', query, sendSnapshot = false }, onMessage, onStatus) {
  let conn = conns.get(database);
  if (!conn) {
    conn = new Conn(database);
    conns.set(database, conn);
  }
  const id = conn.add({ query, sendSnapshot, resumeToken: null, onMessage, onStatus });
  return () => conn.remove(id);
}
