// One chat's run as a timeline: the user's messages, the orchestrator's
// decisions (its reply holds the decided plan), each task with its
// sub-agent, the sub-agent's messages and tool calls, and the answers.
// Everything here is rendered as text (Preact escapes it).
import { api, docURL } from '../api.js';
import { Badge, ErrorBox, Json, Time, fmtDuration, parseJSONOr, useAction } from '../ui.jsx';

const UNFINISHED = new Set(['pending', 'running', 'waiting', 'waiting_tool']);

/** updatedAt − createdAt: how long a finished task or sub-agent took (so far, while running). */
function span(doc) {
  return typeof doc.createdAt === 'number' && typeof doc.updatedAt === 'number' ? doc.updatedAt - doc.createdAt : null;
}

/** Collapsed JSON or text, opened on demand. */
function Fold({ label, value, testid }) {
  if (value === undefined || value === null || value === '') return null;
  const v = parseJSONOr(value);
  return (
    <details class="fold" data-testid={testid}>
      <summary>{label}</summary>
      {typeof v === 'string' ? <pre class="json">{v}</pre> : <Json value={v} />}
    </details>
  );
}

function Meta({ children }) {
  return <div class="meta small muted">{children}</div>;
}

/**
 * The state of a question now. The question message keeps the "waiting" it
 * was written with; its task says whether that wait is still open (the task
 * waits with the question's waitId) or how it ended (waitState.resolution).
 */
function questionState(doc, task) {
  if (!task) return { status: doc.status, open: doc.status === 'waiting' };
  if (task.status === 'waiting' && task.waitId === doc.waitId) return { status: 'waiting', open: true };
  const ws = task.waitState;
  return { status: (ws && ws.messageId === doc.id && ws.resolution) || 'ended', open: false };
}

function Message({ doc, onReply, tasks }) {
  if (doc.role === 'user') {
    return (
      <li class="tl-user" data-testid="tl-user">
        <div class="who">User</div>
        <div class="text">{String(doc.content ?? '')}</div>
        <Meta>
          <Time value={doc.createdAt} /> · {doc.id}
          {doc.replyTo ? ` · reply to ${doc.replyTo}` : ''}
        </Meta>
      </li>
    );
  }
  if (Array.isArray(doc.plan)) {
    return (
      <li class="tl-decision" data-testid="tl-decision">
        <div class="who">
          Orchestrator decision <Badge status={doc.status || 'decided'} />
        </div>
        <div class="text">{String(doc.content ?? '')}</div>
        <ul class="plan">
          {doc.plan.map((p) => (
            <li key={p.id}>
              <code>{p.name}</code> <span class="mono small">{typeof p.arguments === 'string' ? p.arguments : JSON.stringify(p.arguments)}</span>
            </li>
          ))}
        </ul>
        <Meta>
          <Time value={doc.createdAt} /> · {doc.model ? `model ${doc.model}` : ''}
          {doc.taskIds?.length ? ` · tasks ${doc.taskIds.join(', ')}` : ''}
        </Meta>
      </li>
    );
  }
  const kind = doc.kind || (doc.taskId ? 'answer' : 'reply');
  const testid = { answer: 'tl-answer', tool: 'tl-mirror', question: 'tl-question' }[kind] || 'tl-message';
  const q = kind === 'question' ? questionState(doc, tasks?.get(doc.taskId)) : null;
  const status = q ? q.status : doc.status;
  return (
    <li class={`tl-${kind}`} data-testid={testid}>
      <div class="who">
        {kind === 'answer' ? 'Answer' : kind === 'tool' ? `Tool call (shown in the chat): ${doc.toolName || ''}` : `Assistant ${kind}`}{' '}
        {status ? <Badge status={status} testid={q ? 'tl-question-status' : undefined} /> : null}
      </div>
      <div class="text">{String(doc.content ?? '')}</div>
      <Meta>
        <Time value={doc.createdAt} /> · {doc.id}
        {doc.taskId ? ` · task ${doc.taskId}` : ''}
      </Meta>
      {q?.open ? (
        // A reply names the question (replyTo), so it reaches this wait even
        // when several tasks of the chat wait (docs/agent-runs.md).
        <button class="link small" data-testid="tl-question-reply" onClick={() => onReply(doc.id)}>
          Reply to this question
        </button>
      ) : null}
    </li>
  );
}

function ToolCall({ doc }) {
  const d = typeof doc.durationMs === 'number' ? doc.durationMs : doc.status === 'pending' ? null : span(doc);
  return (
    <li class="tl-toolcall" data-testid="tl-toolcall">
      <div class="who">
        Tool call <code>{doc.toolName || doc.name}</code> <Badge status={doc.status} testid="toolcall-status" />{' '}
        <span class="small" data-testid="toolcall-duration">
          {fmtDuration(d) ?? '…'}
        </span>
      </div>
      <Fold label="arguments" value={doc.args ?? doc.argsJson} testid="toolcall-args" />
      <Fold label="result" value={doc.result} testid="toolcall-result" />
      {doc.error ? <div class="error">{String(doc.error)}</div> : null}
    </li>
  );
}

function SubMessage({ doc }) {
  const calls = Array.isArray(doc.toolCalls) ? doc.toolCalls.map((c) => c.function?.name).filter(Boolean) : [];
  const text = String(doc.content ?? '');
  return (
    <li class={`tl-sub-${doc.role}`} data-testid="tl-submessage">
      <div class="who">
        {doc.role}
        {doc.name ? ` (${doc.name})` : ''}
        {calls.length ? ` → calls ${calls.join(', ')}` : ''}
      </div>
      {doc.role === 'system' ? <Fold label="system prompt" value={text} /> : text ? <div class="text">{text}</div> : null}
    </li>
  );
}

function SubAgent({ sub, items }) {
  return (
    <div class="subagent" data-testid="tl-subagent">
      <div class="who">
        Sub-agent {sub.role ? <b>{sub.role}</b> : null} <Badge status={sub.status} testid="subagent-status" />
      </div>
      <Meta>
        iterations {sub.iterationCount ?? 0} · <span data-testid="subagent-tokens">{sub.tokensUsed ?? 0} tokens</span>
        {sub.tokenBudget ? ` (context budget ${sub.tokenBudget})` : ''}
        {sub.model ? ` · model ${sub.model}` : ''} · {fmtDuration(span(sub)) ?? ''}
      </Meta>
      <ul class="timeline nested">
        {items.map(({ kind, doc }) =>
          kind === 'toolcall' ? <ToolCall key={doc.collection + doc.id} doc={doc} /> : <SubMessage key={doc.collection + doc.id} doc={doc} />,
        )}
      </ul>
    </div>
  );
}

/**
 * A button that cancels an agent document of the default database (a task,
 * or a chat's run) by setting `field` to "canceled"; the API's answer to a
 * refusal is shown under it.
 */
export function CancelDoc({ doc, field, testid, children }) {
  const { busy, error, run } = useAction();
  const cancel = () => run(() => api.patch(docURL('default', `${doc.collection}/${doc.id}`), { doc: { [field]: 'canceled' } }));
  return (
    <>
      <button class="danger" data-testid={testid} disabled={busy} onClick={cancel}>
        {children}
      </button>
      <ErrorBox error={error} />
    </>
  );
}

function CancelTask({ doc }) {
  if (!UNFINISHED.has(doc.status)) return null;
  return (
    <CancelDoc doc={doc} field="status" testid="task-cancel">
      Cancel task
    </CancelDoc>
  );
}

function Task({ doc, sub, subItems }) {
  const done = !UNFINISHED.has(doc.status);
  return (
    <li class="tl-task" data-testid="tl-task">
      <div class="who">
        Task <b>{doc.name || doc.type}</b> <Badge status={doc.status} testid="task-status" />{' '}
        <span class="small muted">{done ? fmtDuration(span(doc)) : 'in progress'}</span>{' '}
        <CancelTask doc={doc} />
      </div>
      {doc.instruction ? <div class="text">{String(doc.instruction)}</div> : null}
      {doc.question ? <div class="text">Asks: {String(doc.question)}</div> : null}
      {doc.error ? <div class="error">{String(doc.error)}</div> : null}
      <Fold label="result" value={doc.result} testid="task-result" />
      <Meta>
        <Time value={doc.createdAt} /> · {doc.id}
        {doc.parentTaskId ? ` · child of ${doc.parentTaskId}` : ''}
        {doc.canceledBy ? ` · canceled by ${doc.canceledBy}` : ''}
      </Meta>
      {sub ? <SubAgent sub={sub} items={subItems} /> : null}
    </li>
  );
}

/** The merged, chronological run (see buildRun). */
export default function Timeline({ run, onReply }) {
  if (run.items.length === 0) return <p class="muted">No messages in this chat yet.</p>;
  const tasks = new Map(run.items.filter((it) => it.kind === 'task').map((it) => [it.doc.id, it.doc]));
  return (
    <ul class="timeline agent-run" data-testid="agents-timeline">
      {run.items.map((it) =>
        it.kind === 'message' ? (
          <Message key={it.doc.collection + it.doc.id} doc={it.doc} onReply={onReply} tasks={tasks} />
        ) : it.kind === 'task' ? (
          <Task key={it.doc.collection + it.doc.id} doc={it.doc} sub={it.sub} subItems={it.subItems} />
        ) : (
          <li key={it.doc.collection + it.doc.id}>
            <SubAgent sub={it.sub} items={it.subItems} />
          </li>
        ),
      )}
    </ul>
  );
}
