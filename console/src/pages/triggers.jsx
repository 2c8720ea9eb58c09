// Triggers: every trigger with its status, counters and last error; the
// operations on each; reload of triggers.json; the register form; and the
// detail view (#/triggers/<id>).
import { useState } from 'preact/hooks';
import { api } from '../api.js';
import { href } from '../router.js';
import { ErrorBox, Header, useAction, usePoll } from '../ui.jsx';
import { TriggerActions } from './triggers-actions.jsx';
import { TriggerDetail } from './triggers-detail.jsx';
import { TriggerForm } from './triggers-form.jsx';
import { COUNTS, Count, LastError, Revealed, TRIGGERS, TriggerStatus, listTriggers } from './triggers-shared.jsx';

// The list re-reads itself this often while visible, so counters move.
const REFRESH_MS = 4000;

export default function Triggers({ parts }) {
  if (parts[0]) {
    return (
      <>
        <TriggerDetail id={parts[0]} />
        <Revealed />
      </>
    );
  }
  return (
    <>
      <TriggerList />
      <Revealed />
    </>
  );
}

function TriggerList() {
  const { data: list, setData: setList, error, load } = usePoll(listTriggers, REFRESH_MS);
  const [showForm, setShowForm] = useState(false);
  const [notice, setNotice] = useState(null);
  const [reloaded, setReloaded] = useState(null); // the reload's answer
  const reloading = useAction();

  const replace = (t) => setList((l) => l.map((x) => (x.triggerId === t.triggerId ? t : x)));
  const removed = (id) => {
    setList((l) => l.filter((x) => x.triggerId !== id));
    setNotice(`Deleted ${id}.`);
  };

  function reloadFile() {
    setReloaded(null);
    reloading.run(async () => {
      setReloaded((await api.post(`${TRIGGERS}/reload`)).body);
      load();
    });
  }

  return (
    <div class="triggers">
      <Header title="Triggers">
        <button class="primary" data-testid="triggers-new" onClick={() => setShowForm(true)} disabled={showForm}>
          Register trigger
        </button>
        <button data-testid="triggers-reload" onClick={reloadFile} disabled={reloading.busy} title="Re-read triggers.json">
          Reload from file
        </button>
        <button data-testid="triggers-refresh" onClick={load}>
          Refresh
        </button>
      </Header>
      {reloaded ? (
        <div class="notice" data-testid="triggers-reload-result">
          Reloaded: {reloaded.triggers} trigger{reloaded.triggers === 1 ? '' : 's'} in force
          {reloaded.builtin ? ' (no triggers.json: the built-in set stays)' : ''}.
        </div>
      ) : null}
      <ErrorBox error={reloading.error} testid="triggers-reload-error" />
      {notice ? (
        <div class="notice" data-testid="triggers-notice">
          {notice}
        </div>
      ) : null}
      {showForm ? (
        <TriggerForm
          onCancel={() => setShowForm(false)}
          onDone={(id) => {
            setShowForm(false);
            setNotice(`Registered ${id}.`);
            load();
          }}
        />
      ) : null}
      <ErrorBox error={error} testid="triggers-error" />
      {list === null ? <p class="muted">Loading…</p> : <TriggerTable list={list} onChange={replace} onDeleted={removed} />}
    </div>
  );
}

function TriggerTable({ list, onChange, onDeleted }) {
  if (list.length === 0) return <p class="muted" data-testid="triggers-empty">No triggers. Register one, or add them to triggers.json and reload.</p>;
  return (
    <div class="table-scroll">
      <table data-testid="triggers-table">
        <thead>
          <tr>
            <th>Trigger</th>
            <th>Collection · events</th>
            <th>Status · source</th>
            {COUNTS.map(([k, label, title]) => (
              <th key={k} class="num" title={title}>
                {label}
              </th>
            ))}
            <th>Last error</th>
            <th />
          </tr>
        </thead>
        <tbody>
          {list.map((t) => (
            <tr key={t.triggerId} data-testid="trigger-row" data-id={t.triggerId}>
              <td>
                <a href={href('triggers', t.triggerId)} data-testid="trigger-link" class="mono">
                  {t.triggerId}
                </a>
                <div class="muted small">{t.database}</div>
              </td>
              <td>
                <div class="mono">{t.collection}</div>
                <div class="small muted">{(t.events || []).join(', ')}</div>
              </td>
              <td>
                <TriggerStatus t={t} />
                <div class="small muted" data-testid="trigger-source">
                  {t.source}
                </div>
              </td>
              {COUNTS.map(([k]) => (
                <td key={k} class="num">
                  <Count t={t} k={k} />
                </td>
              ))}
              <td class="last-error">
                <LastError t={t} />
              </td>
              <td>
                <TriggerActions t={t} onChange={onChange} onDeleted={onDeleted} />
              </td>
            </tr>
          ))}
        </tbody>
      </table>
    </div>
  );
}
