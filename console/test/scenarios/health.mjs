// Health: after a few writes and with a realtime stream open, the page
// shows commits, a commit rate from two scrapes and the connection.
export const name = 'health';

export default async function (t) {
  const { uid, token } = await t.signUp('health-carol', 'correct horse battery');
  // One realtime connection for the page to count (SSE, as a client app).
  const stream = new AbortController();
  const sse = await fetch(
    `${t.url}/realtime/sse?database=default&collection=${encodeURIComponent(`users/${uid}/notes`)}&access_token=${encodeURIComponent(token)}`,
    { signal: stream.signal },
  );
  t.assert(sse.status === 200, `sse: ${sse.status}`);
  try {
    const write = async (i) => {
      const r = await t.api('PUT', `/api/v1/databases/default/documents/health-items/h${i}`, { doc: { n: i } });
      t.assert(r.status < 300, `write ${i}: ${r.status}`);
    };
    for (let i = 0; i < 5; i++) await write(i);
    await t.signIn();
    await t.id('nav-health').click();
    await t.expectText(t.id('health-ready'), 'ok');
    await t.expectText(t.id('health-commits'), /[1-9][\d,]* commits since start/);
    await t.eventually(async () => Number((await t.id('health-connections-value').innerText()).replace(/,/g, '')) >= 1, {
      what: 'at least one realtime connection',
    });
    await t.expectText(t.id('health-connections'), 'sse');
    t.assert(Number(await t.id('health-head-seq-value').innerText().then((s) => s.replace(/,/g, ''))) > 0, 'head seq');
    // Writes between two scrapes make a commit rate (the page scrapes every 5 s).
    for (let i = 5; i < 15; i++) await write(i);
    await t.eventually(async () => /^[\d.,]+\/s$/.test((await t.id('health-commits-value').innerText()).trim()), {
      timeout: 15000,
      what: 'a commits/s rate after the second scrape',
    });
    await t.expectText(t.id('health-http-value'), '/s');
    await t.shot('health');
  } finally {
    stream.abort();
  }
}
