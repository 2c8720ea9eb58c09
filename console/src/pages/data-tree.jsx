// The Data page's tree: databases → collections → documents →
// subcollections, each level loaded when opened and paged with its
// nextCursor; a "Collection groups" branch per database opens a pattern on
// the Query page. The nodes on the current route open themselves.
import { useEffect, useState } from 'preact/hooks';
import { api, docURL, pageOf } from '../api.js';
import { href } from '../router.js';
import { ErrorBox, More } from '../ui.jsx';
import { catalogPage, dataChanged, dataHref, usePaged } from './data-util.jsx';

const DOCS_PER_NODE = 50;

/** Whether the route {db, path} is at or below path in db. */
function onRoute(current, db, path) {
  if (current.db !== db) return false;
  if (!path) return true;
  return current.path === path || current.path.startsWith(`${path}/`);
}

/** Open state that follows the route: a node opens when the route enters it. */
function useOpen(routed) {
  const [open, setOpen] = useState(routed);
  useEffect(() => {
    if (routed) setOpen(true);
  }, [routed]);
  return [open, setOpen];
}

function Toggle({ open, setOpen, testid }) {
  return (
    <button class="toggle" data-testid={testid} aria-expanded={open} onClick={() => setOpen(!open)}>
      {open ? '▾' : '▸'}
    </button>
  );
}

function Paged({ list, testid, empty, children }) {
  return (
    <>
      {children}
      {list.error ? (
        <li>
          <ErrorBox error={list.error} />
        </li>
      ) : null}
      {!list.loading && !list.error && !list.items.length ? <li class="muted small">{empty}</li> : null}
      {list.next ? (
        <li>
          <More cursor={list.next} loading={list.loading} onMore={list.more} testid={testid} />
        </li>
      ) : null}
    </>
  );
}

/** The collections under parent ("" = top level, else a document path). */
function Collections({ db, parent, current }) {
  const list = usePaged((after) => catalogPage(db, 'collections', after, parent), [db, parent, dataChanged.value]);
  return (
    <ul>
      <Paged list={list} testid={`tree-more-${parent || db}`} empty={parent ? 'No subcollections' : 'No collections'}>
        {list.items.map((p) => (
          <CollectionNode key={p} db={db} path={p} current={current} />
        ))}
      </Paged>
    </ul>
  );
}

function CollectionNode({ db, path, current }) {
  const [open, setOpen] = useOpen(onRoute(current, db, path));
  const name = path.split('/').pop();
  return (
    <li>
      <div class="node">
        <Toggle open={open} setOpen={setOpen} testid={`tree-toggle-${path}`} />
        <a href={dataHref(db, path)} class={current.db === db && current.path === path ? 'active' : ''} data-testid={`tree-${path}`}>
          {name}
        </a>
      </div>
      {open ? <Documents db={db} collection={path} current={current} /> : null}
    </li>
  );
}

function Documents({ db, collection, current }) {
  const list = usePaged(
    async (after) => {
      const qs = new URLSearchParams({ limit: String(DOCS_PER_NODE) });
      if (after) qs.set('startAfter', after);
      const page = pageOf(await api.get(`${docURL(db, collection)}?${qs}`));
      return { items: page.docs.map((d) => d.id), next: page.nextCursor };
    },
    [db, collection, dataChanged.value],
  );
  return (
    <ul>
      <Paged list={list} testid={`tree-more-${collection}`} empty="No documents">
        {list.items.map((id) => (
          <DocNode key={id} db={db} path={`${collection}/${id}`} id={id} current={current} />
        ))}
      </Paged>
    </ul>
  );
}

function DocNode({ db, path, id, current }) {
  const [open, setOpen] = useOpen(onRoute(current, db, path));
  return (
    <li>
      <div class="node">
        <Toggle open={open} setOpen={setOpen} testid={`tree-toggle-${path}`} />
        <a href={dataHref(db, path)} class={`doc ${current.db === db && current.path === path ? 'active' : ''}`} data-testid={`tree-${path}`}>
          {id}
        </a>
      </div>
      {open ? <Collections db={db} parent={path} current={current} /> : null}
    </li>
  );
}

/** Collection groups (patterns of depth ≥ 3) open as queries. */
function Groups({ db }) {
  const [open, setOpen] = useState(false);
  const list = usePaged(async (after) => (open ? catalogPage(db, 'groups', after) : { items: [], next: null }), [db, open]);
  return (
    <li>
      <div class="node">
        <Toggle open={open} setOpen={setOpen} testid={`tree-groups-${db}`} />
        <span class="muted">Collection groups</span>
      </div>
      {open ? (
        <ul>
          <Paged list={list} testid={`tree-more-groups-${db}`} empty="No collection groups">
            {list.items.map((p) => (
              <li key={p}>
                <a href={href('query', db, { collection: p })} class="mono" data-testid={`tree-group-${p}`} title="Query this collection group">
                  {p}
                </a>
              </li>
            ))}
          </Paged>
        </ul>
      ) : null}
    </li>
  );
}

function DbNode({ db, current }) {
  const [open, setOpen] = useOpen(current.db === db);
  return (
    <li>
      <div class="node">
        <Toggle open={open} setOpen={setOpen} testid={`tree-toggle-db-${db}`} />
        <a href={dataHref(db, '')} class={current.db === db && !current.path ? 'active' : ''} data-testid={`tree-db-${db}`}>
          <b>{db}</b>
        </a>
      </div>
      {open ? (
        <>
          <Collections db={db} parent="" current={current} />
          <ul>
            <Groups db={db} />
          </ul>
        </>
      ) : null}
    </li>
  );
}

/** The whole tree; current = {db, path} of the route. */
export default function Tree({ current }) {
  const list = usePaged(async (after) => {
    const qs = new URLSearchParams({ limit: '100' });
    if (after) qs.set('after', after);
    const res = await api.get(`/admin/v1/databases?${qs}`);
    return { items: res.body.databases, next: res.body.nextCursor };
  }, []);
  // The route's database is shown even before it holds a document.
  const dbs = current.db && !list.loading && !list.items.includes(current.db) ? [current.db, ...list.items] : list.items;
  return (
    <ul class="tree data-tree" data-testid="tree">
      <Paged list={{ ...list, items: dbs }} testid="tree-more-databases" empty="No databases yet">
        {dbs.map((db) => (
          <DbNode key={db} db={db} current={current} />
        ))}
      </Paged>
    </ul>
  );
}
