// Agent runs: pick a chat (every user's users/{uid}/orch-chats, most recent
// activity first), then follow its run live as a timeline. The console
// writes what a chat app writes: a user message (the orchestrator's trigger
// answers it), or the chat's runStatus "canceled" (docs/agent-runs.md).
import { useEffect, useRef, useState } from 'preact/hooks';
import { api, docURL, pageOf, queryURL } from '../api.js';
import { href, navigate } from '../router.js';
import { Badge, ErrorBox, Header, More, Time, useAction } from '../ui.jsx';
import { buildRun, useRun } from './agents-run.js';
import Timeline, { CancelDoc } from './agents-timeline.jsx';

const PAGE = 25;

/** A new document id that sorts after earlier ones and is unique enough for one console. */
function newId(prefix) {
  return `${prefix}${Date.now().toString(36)}${Math.random().toString(36).slice(2, 6)}`;
}

/** Writes a user message into a chat: what the `on-user-message` trigger answers. */
function ask(uid, chatId, content, replyTo) {
  const doc = { role: 'user', content };
  if (replyTo) doc.replyTo = replyTo;
  return api.put(docURL('default', `users/${uid}/orch-chats/${chatId}/messages/${newId('m')}`), { doc });
}

function ChatList({ current, tick }) {
  // The field's text, and the uid the list is filtered by (set on Enter or
  // when the field loses focus, not on every keystroke).
  const [text, setText] = useState('');
  const [uid, setUid] = useState('');
  const [state, setState] = useState({ chats: [], cursor: null, error: null, loading: false, loaded: false });
  const key = uid.trim();
  const gen = useRef(0);

  async function load(after) {
    const g = ++gen.current;
    setState((s) => ({ ...s, loading: true, error: null }));
    try {
      const q = {
        // Every user's chats (a collection group), or one user's.
        collection: key ? `users/${key}/orch-chats` : 'users/*/orch-chats',
        orderBy: [{ field: 'lastActivityAt', direction: 'desc' }],
        limit: PAGE,
      };
      if (after) q.startAfter = after;
      const page = pageOf(await api.post(queryURL('default'), q));
      if (g !== gen.current) return; // a newer listing is on its way
      setState((s) => ({
        chats: after ? [...s.chats, ...page.docs] : page.docs,
        cursor: page.nextCursor,
        error: null,
        loading: false,
        loaded: true,
      }));
    } catch (error) {
      if (g === gen.current) setState((s) => ({ ...s, error, loading: false, loaded: true }));
    }
  }
  // Listed again when the user filter changes, when another chat is
  // opened, and when the open chat's document appears or its run changes
  // state (a chat started from the form exists once the orchestrator ran).
  useEffect(() => {
    load(null);
  }, [key, current?.uid, current?.chatId, tick]);

  return (
    <div class="side panel" data-testid="agents-chats">
      <div class="row filter">
        <input
          data-testid="agents-filter-uid"
          placeholder="User uid (all users)"
          value={text}
          onInput={(e) => setText(e.currentTarget.value)}
          onChange={(e) => setUid(e.currentTarget.value)}
        />
        <button data-testid="agents-refresh" onClick={() => load(null)} disabled={state.loading}>
          Refresh
        </button>
      </div>
      <ErrorBox error={state.error} />
      <ul class="chat-list">
        {state.chats.map((c) => {
          const cuid = c.collection.split('/')[1];
          const active = current && current.uid === cuid && current.chatId === c.id;
          return (
            <li key={c.collection + c.id} class={active ? 'active' : ''}>
              <a href={href('agents', cuid, c.id)} data-testid={`agents-chat-${c.id}`}>
                <b>{c.title || c.id}</b> <Badge status={c.runStatus || c.status || '—'} />
                <div class="small muted">
                  <Time value={c.lastActivityAt ?? c.updatedAt} /> · {c.tokensUsed ?? 0} tokens
                </div>
                <div class="small muted mono">{cuid}</div>
              </a>
            </li>
          );
        })}
        {state.loaded && !state.loading && state.chats.length === 0 ? <li class="muted">No chats.</li> : null}
      </ul>
      <More cursor={state.cursor} loading={state.loading} onMore={() => load(state.cursor)} testid="agents-more" />
      <NewChat defaultUid={key} />
    </div>
  );
}

function NewChat({ defaultUid }) {
  const [uid, setUid] = useState(defaultUid);
  // The picker's user filter, when set, is the natural default.
  useEffect(() => {
    if (defaultUid) setUid(defaultUid);
  }, [defaultUid]);
  const [text, setText] = useState('');
  const { busy, error, run } = useAction();
  function submit(e) {
    e.preventDefault();
    const u = uid.trim();
    const chatId = newId('c');
    run(async () => {
      await ask(u, chatId, text);
      setText('');
      navigate('agents', u, chatId);
    });
  }
  return (
    <form class="new-chat" onSubmit={submit} data-testid="agents-new">
      <h3>New chat</h3>
      <label>
        For the user (uid)
        <input data-testid="agents-new-uid" value={uid} required onInput={(e) => setUid(e.currentTarget.value)} />
      </label>
      <label>
        First message
        <textarea data-testid="agents-new-text" rows="2" value={text} required onInput={(e) => setText(e.currentTarget.value)} />
      </label>
      <button class="primary" type="submit" data-testid="agents-new-submit" disabled={busy}>
        Start chat
      </button>
      <ErrorBox error={error} testid="agents-new-error" />
    </form>
  );
}

function AskBox({ uid, chatId, disabled, replyTo, onSent }) {
  const [text, setText] = useState('');
  const { busy, error, run } = useAction();
  function submit(e) {
    e.preventDefault();
    run(async () => {
      await ask(uid, chatId, text, replyTo);
      setText('');
      onSent();
    });
  }
  return (
    <form class="ask row" onSubmit={submit}>
      {replyTo ? (
        <span class="badge" data-testid="agent-ask-replyto">
          reply to {replyTo}{' '}
          <button type="button" class="link" data-testid="agent-ask-replyto-clear" onClick={onSent} aria-label="Not a reply">
            ×
          </button>
        </span>
      ) : null}
      <input
        class="grow"
        data-testid="agent-ask"
        placeholder={disabled ? 'This chat is closed' : 'Ask as the user…'}
        value={text}
        required
        disabled={disabled}
        onInput={(e) => setText(e.currentTarget.value)}
      />
      <button class="primary" type="submit" data-testid="agent-ask-send" disabled={busy || disabled}>
        Send
      </button>
      <ErrorBox error={error} testid="agent-ask-error" />
    </form>
  );
}

function CancelRun({ chat }) {
  if (!chat || chat.runStatus !== 'running') return null;
  return (
    <CancelDoc doc={chat} field="runStatus" testid="agents-cancel">
      Cancel run
    </CancelDoc>
  );
}

function Run({ uid, chatId, onChat }) {
  const live = useRun(uid, chatId);
  const run = buildRun(live.docs, chatId);
  const chat = run.chat;
  const chatState = chat ? `${chat.runStatus}/${chat.status}` : '';
  const [replyTo, setReplyTo] = useState(null);
  useEffect(() => {
    if (chatState) onChat();
  }, [chatState]);
  return (
    <div class="grow" data-testid="agents-run">
      <div class="panel">
        <div class="page-header">
          <h3>
            Chat {chat?.title ? `“${chat.title}” ` : ''}
            <span class="mono small">{chatId}</span>
          </h3>
          <div class="actions">
            <Badge status={live.status} testid="agents-live" />
            <CancelRun chat={chat} />
          </div>
        </div>
        <dl class="facts">
          <dt>User</dt>
          <dd class="mono">{uid}</dd>
          <dt>Run</dt>
          <dd>
            <Badge status={chat?.runStatus ?? 'no run yet'} testid="agents-status" /> chat {chat?.status ?? '—'}
          </dd>
          <dt>Tokens</dt>
          <dd data-testid="agents-tokens">
            {chat?.tokensUsed ?? 0} by the orchestrator (chat) · {run.subTokens} by sub-agents
            <span class="small muted"> — per-message tokens are not stored</span>
          </dd>
          <dt>Model</dt>
          <dd>{chat?.lastModel ?? '—'}</dd>
          <dt>Last activity</dt>
          <dd>
            <Time value={chat?.lastActivityAt} />
          </dd>
        </dl>
        <ErrorBox error={live.error} />
        <AskBox uid={uid} chatId={chatId} disabled={chat?.status === 'closed'} replyTo={replyTo} onSent={() => setReplyTo(null)} />
      </div>
      <div class="panel">
        <Timeline run={run} onReply={setReplyTo} />
      </div>
    </div>
  );
}

export default function Agents({ parts }) {
  const [uid, chatId] = parts;
  const current = uid && chatId ? { uid, chatId } : null;
  const [tick, setTick] = useState(0);
  return (
    <>
      <Header title="Agent runs" />
      <div class="cols">
        <ChatList current={current} tick={tick} />
        {current ? (
          <Run uid={uid} chatId={chatId} key={`${uid}/${chatId}`} onChat={() => setTick((t) => t + 1)} />
        ) : (
          <div class="grow panel muted">Pick a chat, or start one for a user.</div>
        )}
      </div>
    </>
  );
}
