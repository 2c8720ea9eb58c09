// Agent runs: a user's question answered by the offline model (delegation,
// the calculator, the final answer), followed live in the timeline; then a
// second question from the Ask box and a chat started from the New chat form.
export const name = 'agents';

export default async function (t) {
  const { uid } = await t.signUp('agents-alice', 'correct horse battery');
  // As a chat app would (here as the admin): the first user message of a chat.
  const put = await t.api('PUT', `/api/v1/databases/default/documents/users/${uid}/orch-chats/agents-c1/messages/m1`, {
    doc: { role: 'user', content: 'What is 6*7?' },
  });
  t.assert(put.status === 200 || put.status === 201, `put message: ${put.status} ${JSON.stringify(put.body)}`);
  // The orchestrator creates the chat document; the picker lists chats by it.
  await t.eventually(
    async () => (await t.api('GET', `/api/v1/databases/default/documents/users/${uid}/orch-chats/agents-c1`)).status === 200,
    { timeout: 30000, what: 'the chat document' },
  );

  await t.signIn();
  await t.id('nav-agents').click();
  // Narrow the picker to this user, then open the chat.
  await t.id('agents-filter-uid').fill(uid);
  await t.id('agents-filter-uid').press('Enter');
  await t.id('agents-chat-agents-c1').click();
  await t.id('agents-timeline').waitFor();
  await t.expectText(t.id('agents-live'), 'live');

  await t.expectText(t.id('tl-user').first(), 'What is 6*7?');
  await t.expectText(t.id('tl-decision').first(), 'delegate_task');
  await t.expectText(t.id('tl-answer').first(), 'Result: {"result":42}', { timeout: 30000 });
  await t.expectText(t.id('task-status').first(), 'success');
  await t.expectText(t.id('subagent-status').first(), 'completed');
  const call = t.id('tl-toolcall').first();
  await t.expectText(call, 'calculator');
  await t.expectText(call.getByTestId('toolcall-status'), 'success');
  const took = await call.getByTestId('toolcall-duration').innerText();
  t.assert(/^\d+(\.\d+)? (ms|s)$/.test(took.trim()), `tool call duration: ${JSON.stringify(took)}`);
  await call.getByTestId('toolcall-result').locator('summary').click();
  await t.expectText(call.getByTestId('toolcall-result'), '42');
  await t.expectText(t.id('agents-tokens'), 'by sub-agents');
  await t.expectText(t.id('agents-status'), 'idle');

  // A follow-up from the Ask box arrives in the same timeline, live.
  await t.id('agent-ask').fill('What is 2+3?');
  await t.id('agent-ask-send').click();
  await t.expectText(t.id('tl-answer').nth(1), 'Result: {"result":5}', { timeout: 30000 });
  const stored = await t.api('POST', '/api/v1/databases/default/query', {
    collection: `users/${uid}/orch-chats/agents-c1/messages`,
    filters: [{ field: 'role', op: '==', value: 'user' }],
  });
  t.assert(stored.body.docs.length === 2, `user messages stored: ${JSON.stringify(stored.body)}`);
  await t.page.evaluate(() => window.scrollTo(0, 0));
  await t.shot('agents');

  // A new chat for the user, started from the form: its own run, listed.
  await t.eventually(async () => (await t.id('agents-new-uid').inputValue()) === uid, { what: "the picker's uid as the new chat's" });
  await t.id('agents-new-text').fill('What is 10-3?');
  await t.id('agents-new-submit').click();
  await t.expectText(t.id('tl-answer').first(), 'Result: {"result":7}', { timeout: 30000 });
  t.assert(!(await t.id('agents-timeline').innerText()).includes('6*7'), 'the new chat shows only its own run');
  await t.eventually(async () => (await t.page.locator('[data-testid^="agents-chat-"]').count()) >= 2, { what: 'both chats in the picker' });

  // The sub-agent asks the user ("ask me" makes the offline model call
  // ask_user); the reply names the question and resumes the run.
  await t.id('agent-ask').fill('ask me something');
  await t.id('agent-ask-send').click();
  const question = t.id('tl-question').first();
  await t.expectText(question, 'What exactly should I look into?', { timeout: 30000 });
  await t.expectText(t.id('task-status').nth(1), 'waiting');
  await t.expectText(t.id('agents-status'), 'running');
  await question.getByTestId('tl-question-reply').click();
  await t.expectText(t.id('agent-ask-replyto'), '-q');
  const questionId = /reply to (\S+)/.exec(await t.id('agent-ask-replyto').innerText())[1];
  await t.id('agent-ask').fill('What is 6*7?');
  await t.id('agent-ask-send').click();
  await t.expectText(t.id('tl-answer').nth(1), 'Result: {"result":42}', { timeout: 30000 });
  t.assert((await t.id('agent-ask-replyto').count()) === 0, 'the reply target is cleared once sent');
  const chatPath = decodeURIComponent(new URL(t.page.url()).hash.replace('#/agents/', '')).split('/');
  const replies = await t.api('POST', '/api/v1/databases/default/query', {
    collection: `users/${chatPath[0]}/orch-chats/${chatPath[1]}/messages`,
    filters: [{ field: 'replyTo', op: '==', value: questionId }, { field: 'role', op: '==', value: 'user' }],
  });
  t.assert(replies.body.docs.length === 1 && replies.body.docs[0].content === 'What is 6*7?', `the reply names the question: ${JSON.stringify(replies.body)}`);
  await t.expectText(t.id('agents-status'), 'idle');
  // The answered question no longer shows as waiting (its message keeps the
  // "waiting" it was written with; the task tells how the wait ended).
  await t.expectText(question.getByTestId('tl-question-status'), 'replied');
  t.assert((await question.getByTestId('tl-question-reply').count()) === 0, 'no Reply on an answered question');

  // Cancel a run that waits for the user: its task is canceled and the chat
  // gets the runtime's notice.
  await t.id('agent-ask').fill('ask me once more');
  await t.id('agent-ask-send').click();
  await t.expectText(t.id('tl-question').nth(1), 'What exactly should I look into?', { timeout: 30000 });
  await t.expectText(t.id('agents-status'), 'running');
  await t.id('agents-cancel').click();
  await t.expectText(t.id('task-status').nth(2), 'canceled', { timeout: 30000 });
  await t.expectText(t.id('agents-timeline'), 'Canceled:', { timeout: 30000 });
  await t.expectText(t.id('agents-status'), 'idle', { timeout: 30000 });
  await t.eventually(async () => (await t.id('tl-question').nth(1).getByTestId('tl-question-status').innerText()).trim() !== 'waiting', {
    what: 'the question of the canceled task no longer waiting',
  });
  t.assert((await t.id('tl-question').nth(1).getByTestId('tl-question-reply').count()) === 0, 'no Reply once the wait is over');
}
