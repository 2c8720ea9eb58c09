// The documents of one chat's agent run, kept live: six realtime
// subscriptions (snapshot, then changes) on the chat document and the
// collections below it (docs/architecture.md, "The agent runtime's
// documents"), merged into one map by document path.
import { useEffect, useState } from 'preact/hooks';
import { subscribe } from '../ws.js';

/** The run's collections below users/{uid}/orch-chats/{chatId}: kind → pattern. */
function runQueries(uid, chatId) {
  const chat = `users/${uid}/orch-chats/${chatId}`;
  return [
    // The chat document itself: its collection, narrowed to its id.
    ['chat', { collection: `users/${uid}/orch-chats`, filters: [{ field: 'id', op: '==', value: chatId }] }],
    ['message', { collection: `${chat}/messages` }],
    ['task', { collection: `${chat}/tasks` }],
    ['subagent', { collection: `${chat}/sub-agents` }],
    ['submessage', { collection: `${chat}/sub-agents/*/messages` }],
    ['toolcall', { collection: `${chat}/sub-agents/*/tool-calls` }],
  ];
}

/** The sub-agent id of a document in sub-agents/{id}/messages or …/tool-calls. */
function subAgentOf(collection) {
  const parts = collection.split('/');
  return parts[parts.length - 2];
}

/**
 * Subscribes to a chat's run. Returns {docs: Map path → {kind, doc}, status,
 * error}; docs is a new Map on every change so components re-render.
 */
export function useRun(uid, chatId) {
  const [state, setState] = useState({ docs: new Map(), status: 'connecting', error: null });
  const [generation, setGeneration] = useState(0);
  useEffect(() => {
    if (!uid || !chatId) return undefined;
    setState({ docs: new Map(), status: 'connecting', error: null });
    const live = new Set();
    const queries = runQueries(uid, chatId);
    const unsubs = queries.map(([kind, query]) =>
      subscribe(
        { database: 'default', query, sendSnapshot: true },
        (msg) => {
          const p = msg.payload || {};
          if (msg.type === 'reset') {
            // The stream's token is older than the change log's retention:
            // start again from a fresh snapshot.
            setGeneration((g) => g + 1);
            return;
          }
          if (msg.type === 'error') {
            setState((s) => ({ ...s, error: { code: p.details?.code || p.code, message: p.message || 'realtime error' } }));
            return;
          }
          setState((s) => {
            const docs = new Map(s.docs);
            if (msg.type === 'snapshot') {
              for (const d of p.documents || []) if (d) docs.set(`${d.collection}/${d.id}`, { kind, doc: d });
            } else if (msg.type === 'event' && p.delta) {
              const d = p.delta;
              if (d.type === 'delete' || !d.document) docs.delete(d.path);
              else docs.set(d.path, { kind, doc: { ...d.document, id: d.id, collection: d.collection } });
            } else return s;
            return { ...s, docs };
          });
        },
        (st) => {
          if (st === 'live') live.add(kind);
          else live.delete(kind);
          setState((s) => ({ ...s, status: live.size === queries.length ? 'live' : st === 'live' ? 'connecting' : st }));
        },
      ),
    );
    return () => unsubs.forEach((u) => u());
  }, [uid, chatId, generation]);
  return state;
}

const byTime = (a, b) => (a.createdAt ?? 0) - (b.createdAt ?? 0) || String(a.id).localeCompare(String(b.id));

/**
 * The run as a tree for the timeline: the chat, its messages and tasks in
 * one chronological list, each task with its sub-agent, and each sub-agent
 * with its messages and tool calls in order.
 */
export function buildRun(docs, chatId) {
  let chat = null;
  const messages = [];
  const tasks = [];
  const subagents = new Map();
  const subItems = new Map(); // sub-agent id → [{kind, doc}]
  for (const { kind, doc } of docs.values()) {
    if (kind === 'chat') {
      if (doc.id === chatId) chat = doc;
    } else if (kind === 'message') messages.push(doc);
    else if (kind === 'task') tasks.push(doc);
    else if (kind === 'subagent') subagents.set(doc.id, doc);
    else {
      const sid = subAgentOf(doc.collection);
      if (!subItems.has(sid)) subItems.set(sid, []);
      subItems.get(sid).push({ kind, doc });
    }
  }
  for (const list of subItems.values()) list.sort((a, b) => byTime(a.doc, b.doc));
  const used = new Set();
  const items = [
    ...messages.map((doc) => ({ kind: 'message', doc })),
    ...tasks.map((doc) => {
      const sid = doc.subAgentId || doc.id;
      const sub = subagents.get(sid) || null;
      if (sub) used.add(sid);
      return { kind: 'task', doc, sub, subItems: subItems.get(sid) || [] };
    }),
  ];
  // A sub-agent whose task is not (yet) visible still shows.
  for (const [sid, sub] of subagents) {
    if (!used.has(sid)) items.push({ kind: 'subagent', doc: sub, sub, subItems: subItems.get(sid) || [] });
  }
  items.sort((a, b) => byTime(a.doc, b.doc));
  let subTokens = 0;
  for (const s of subagents.values()) subTokens += Number(s.tokensUsed) || 0;
  return { chat, items, subTokens, counts: { messages: messages.length, tasks: tasks.length, subagents: subagents.size } };
}
