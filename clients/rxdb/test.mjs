// Compatibility test: the real RxDB client (rxdb@15.22.0 +
// rxdb-server@15.22.0 replicateServer) against a running Loom server.
//
// Environment:
//   LOOM_URL         http://127.0.0.1:port
//   LOOM_TOKEN       a user's access token
//   LOOM_COLLECTION  a collection the user may read and write, e.g. users/{uid}/todos
//   LOOM_DB          database name (default "default")
//
// Exits 0 when every step passed, 1 otherwise (with the failing step).

import { createRxDatabase } from 'rxdb';
import { getRxStorageMemory } from 'rxdb/plugins/storage-memory';
import { replicateServer } from 'rxdb-server/plugins/replication-server';
import EventSource from 'eventsource';

const URL_ = must('LOOM_URL');
const TOKEN = must('LOOM_TOKEN');
const COLL = must('LOOM_COLLECTION');
const DB = process.env.LOOM_DB || 'default';
const AUTH = { Authorization: 'Bearer ' + TOKEN };
const BASE = `${URL_}/replication/rxdb/${DB}/${COLL}/0`;
const REST = `${URL_}/api/v1/databases/${DB}/documents/${COLL}`;
const WAIT_MS = 10_000;

function must(name) {
    const v = process.env[name];
    if (!v) {
        console.error(`missing environment variable ${name}`);
        process.exit(2);
    }
    return v;
}

// Record every replication request the client makes: method, path, status,
// whether it carried the Authorization header, and push bodies/responses.
const requests = [];
const realFetch = globalThis.fetch;
globalThis.fetch = async (url, init = {}) => {
    const res = await realFetch(url, init);
    if (String(url).startsWith(`${URL_}/replication/`)) {
        const rec = {
            method: init.method || 'GET',
            path: String(url).slice(BASE.length),
            status: res.status,
            auth: !!(init.headers && init.headers.Authorization),
        };
        if (rec.path === '/push') {
            rec.body = JSON.parse(init.body);
            rec.response = await res.clone().json().catch(() => null);
        }
        requests.push(rec);
    }
    return res;
};

// An EventSource whose connection the test can drop: the client sees an
// error and a new open, as after a network failure.
const streams = [];
class DroppableEventSource {
    constructor(url, opts) {
        this.url = url;
        this.opts = opts;
        this.opens = 0;
        this.#connect();
        streams.push(this);
    }
    #connect() {
        this.inner = new EventSource(this.url, this.opts);
        this.inner.onopen = (e) => { this.opens++; this.onopen && this.onopen(e); };
        this.inner.onmessage = (e) => this.onmessage && this.onmessage(e);
        this.inner.onerror = (e) => this.onerror && this.onerror(e);
    }
    async drop(whileDown) {
        this.inner.close();
        if (whileDown) await whileDown();
        this.onerror && this.onerror({ status: undefined });
        this.#connect();
    }
    close() { this.inner.close(); }
}

async function rest(method, id, body) {
    const res = await realFetch(`${REST}/${id}`, {
        method,
        headers: { ...AUTH, 'Content-Type': 'application/json' },
        body: body === undefined ? undefined : JSON.stringify(body),
    });
    const text = await res.text();
    return { status: res.status, json: text ? JSON.parse(text) : null };
}

async function restOK(method, id, body, want) {
    const r = await rest(method, id, body);
    if (!want.includes(r.status)) throw new Error(`${method} ${id}: status ${r.status}, want ${want}: ${JSON.stringify(r.json)}`);
    return r.json;
}

async function waitFor(what, fn, ms = WAIT_MS) {
    const deadline = Date.now() + ms;
    let last;
    while (Date.now() < deadline) {
        try {
            last = await fn();
            if (last) return last;
        } catch (e) {
            last = e;
        }
        await new Promise((r) => setTimeout(r, 50));
    }
    throw new Error(`timed out waiting for ${what} (last: ${last instanceof Error ? last.message : JSON.stringify(last)})`);
}

function assert(cond, msg) {
    if (!cond) throw new Error('assertion failed: ' + msg);
}

const schema = {
    version: 0,
    primaryKey: 'id',
    type: 'object',
    properties: {
        id: { type: 'string', maxLength: 100 },
        title: { type: 'string' },
        n: { type: 'number' },
    },
    required: ['id'],
};

async function openClient(name) {
    const db = await createRxDatabase({ name, storage: getRxStorageMemory(), multiInstance: false });
    await db.addCollections({ todos: { schema } });
    return db;
}

function replicate(collection, headers = AUTH) {
    const state = replicateServer({
        collection,
        replicationIdentifier: 'loom-' + COLL,
        url: BASE,
        headers,
        live: true,
        retryTime: 300,
        waitForLeadership: false,
        pull: { batchSize: 3 },
        push: { batchSize: 10 },
        eventSource: DroppableEventSource,
    });
    state.error$.subscribe((e) => {
        const unauthorized = e && (e.code === 'RC_UNAUTHORIZED' || String(e.message).includes('RC_UNAUTHORIZED'));
        if (!unauthorized) console.error('replication error:', e.code || e, e.parameters?.errors?.[0]?.message || '');
    });
    return state;
}

const steps = [];
async function step(name, fn) {
    const t0 = Date.now();
    try {
        await fn();
        steps.push(name);
        console.log(`ok   ${name} (${Date.now() - t0} ms)`);
    } catch (e) {
        console.error(`FAIL ${name}: ${e && e.stack ? e.stack : e}`);
        process.exit(1);
    }
}

const db = await openClient('client-a');
const todos = db.todos;
let rep;

await step('initial pull of existing documents (paged)', async () => {
    for (let i = 0; i < 7; i++) await restOK('PUT', `pre${i}`, { doc: { title: `pre ${i}`, n: i } }, [201]);
    await restOK('DELETE', 'pre6', undefined, [204]);
    rep = replicate(todos);
    await rep.awaitInitialReplication();
    const docs = await todos.find().exec();
    const ids = docs.map((d) => d.id).sort();
    assert(JSON.stringify(ids) === JSON.stringify(['pre0', 'pre1', 'pre2', 'pre3', 'pre4', 'pre5']), `client has ${ids}`);
    const pre3 = await todos.findOne('pre3').exec();
    assert(pre3.title === 'pre 3' && pre3.n === 3, `pre3 = ${JSON.stringify(pre3.toJSON())}`);
    const pulls = requests.filter((r) => r.path.startsWith('/pull?'));
    assert(pulls.length >= 3, `expected paged pulls, saw ${pulls.map((r) => r.path)}`);
});

await step('live stream: a server-side write appears in the client', async () => {
    await waitFor('the stream to open', () => streams.length > 0 && streams[streams.length - 1].opens > 0);
    await restOK('PUT', 'srv1', { doc: { title: 'from server', n: 1 } }, [201]);
    await waitFor('srv1 in the client', async () => (await todos.findOne('srv1').exec())?.title === 'from server');
    await restOK('PATCH', 'srv1', { doc: { n: 2 } }, [200]);
    await waitFor('srv1 update in the client', async () => (await todos.findOne('srv1').exec())?.n === 2);
});

await step('push: a client insert appears on the server', async () => {
    await todos.insert({ id: 'cli1', title: 'from client', n: 10 });
    await rep.awaitInSync();
    const got = await waitFor('cli1 on the server', async () => {
        const r = await rest('GET', 'cli1');
        return r.status === 200 && r.json;
    });
    assert(got.title === 'from client' && got.n === 10, `server has ${JSON.stringify(got)}`);
    assert(!('_deleted' in got) && !('_meta' in got) && !('_rev' in got), `server stored RxDB fields: ${JSON.stringify(got)}`);
    const doc = await todos.findOne('cli1').exec();
    await doc.incrementalPatch({ title: 'edited by client' });
    await rep.awaitInSync();
    await waitFor('the client edit on the server', async () => (await rest('GET', 'cli1')).json?.title === 'edited by client');
});

await step('delete: tombstones replicate both ways', async () => {
    const doc = await todos.findOne('cli1').exec();
    await doc.remove();
    await rep.awaitInSync();
    await waitFor('cli1 deleted on the server', async () => (await rest('GET', 'cli1')).status === 404);
    await restOK('DELETE', 'srv1', undefined, [204]);
    await waitFor('srv1 removed from the client', async () => (await todos.findOne('srv1').exec()) === null);
});

await step('stream drop: the client reconnects and re-pulls what it missed', async () => {
    const es = streams[streams.length - 1];
    const opens = es.opens;
    await es.drop(() => restOK('PUT', 'missed', { doc: { title: 'written while the stream was down' } }, [201]));
    await waitFor('the stream to reopen', () => es.opens > opens);
    await waitFor('missed in the client', async () => (await todos.findOne('missed').exec())?.title === 'written while the stream was down');
    await restOK('PUT', 'after', { doc: { title: 'after reconnect' } }, [201]);
    await waitFor('after in the client', async () => (await todos.findOne('after').exec())?.title === 'after reconnect');
});

await step('conflict: an offline edit loses to a newer server edit (master returned)', async () => {
    await rep.cancel();
    await restOK('PATCH', 'pre1', { doc: { title: 'server edit' } }, [200]);
    const doc = await todos.findOne('pre1').exec();
    await doc.incrementalPatch({ title: 'offline client edit' });
    await restOK('PUT', 'offline', { doc: { title: 'written while offline' } }, [201]);

    const pushesBefore = requests.filter((r) => r.path === '/push').length;
    rep = replicate(todos); // same identifier: resumes from the stored checkpoint
    await rep.awaitInitialReplication();
    await rep.awaitInSync();
    await waitFor('the conflict to resolve to the master', async () => (await todos.findOne('pre1').exec())?.title === 'server edit');
    const server = await restOK('GET', 'pre1', undefined, [200]);
    assert(server.title === 'server edit', `server has ${JSON.stringify(server)}`);
    assert((await todos.findOne('offline').exec())?.title === 'written while offline', 're-pull after reconnect missed "offline"');
    const conflicted = requests.slice(0).filter((r) => r.path === '/push').slice(pushesBefore)
        .some((r) => Array.isArray(r.response) && r.response.some((d) => d.id === 'pre1' && d.title === 'server edit'));
    assert(conflicted, 'no push answered with the pre1 master as a conflict');
});

await step('auth: every request carries the Authorization header', async () => {
    const missing = requests.filter((r) => !r.auth);
    assert(missing.length === 0, `requests without Authorization: ${JSON.stringify(missing)}`);
    assert(requests.every((r) => r.status === 200), `non-200 replication responses: ${JSON.stringify(requests.filter((r) => r.status !== 200))}`);
});

await step('auth: 401 emits unauthorized$, setHeaders recovers', async () => {
    const db2 = await openClient('client-b');
    let unauthorized = 0;
    const rep2 = replicate(db2.todos, { Authorization: 'Bearer not-a-token' });
    rep2.unauthorized$.subscribe(() => unauthorized++);
    await waitFor('unauthorized$', () => unauthorized > 0);
    rep2.setHeaders(AUTH);
    await rep2.awaitInitialReplication();
    await waitFor('client-b to pull pre0', async () => (await db2.todos.findOne('pre0').exec())?.title === 'pre 0');
    await rep2.cancel();
    await db2.remove();
});

await rep.cancel();
await db.remove();
for (const s of streams) s.close();
console.log(`all ${steps.length} steps passed`);
process.exit(0);
