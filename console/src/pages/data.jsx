// The Data page (#/data/<db>/<path…>): the tree on the left; on the right a
// collection's documents (odd number of segments) or one document (even).
import { href } from '../router.js';
import { ErrorBox, Header, More } from '../ui.jsx';
import CollectionView from './data-collection.jsx';
import DocumentView from './data-document.jsx';
import Tree from './data-tree.jsx';
import { catalogPage, dataHref, usePaged } from './data-util.jsx';

/** A database: its top-level collections and its collection groups. */
function DatabaseView({ db }) {
  const cols = usePaged((after) => catalogPage(db, 'collections', after), [db]);
  const groups = usePaged((after) => catalogPage(db, 'groups', after), [db]);
  return (
    <div data-testid="db-view">
      <div class="panel">
        <h3>Collections</h3>
        <ErrorBox error={cols.error} />
        {!cols.loading && !cols.items.length && !cols.error ? <p class="muted">No documents in {db} yet.</p> : null}
        <ul class="plain">
          {cols.items.map((p) => (
            <li key={p}>
              <a href={dataHref(db, p)} class="mono" data-testid={`db-collection-${p}`}>
                {p}
              </a>
            </li>
          ))}
        </ul>
        <More cursor={cols.next} loading={cols.loading} onMore={cols.more} testid="db-collections-more" />
      </div>
      <div class="panel">
        <h3>Collection groups</h3>
        <p class="muted small">Collections at the same depth under different documents, queried together.</p>
        <ErrorBox error={groups.error} />
        {!groups.loading && !groups.items.length && !groups.error ? <p class="muted">None.</p> : null}
        <ul class="plain">
          {groups.items.map((p) => (
            <li key={p}>
              <a href={href('query', db, { collection: p })} class="mono" data-testid={`db-group-${p}`}>
                {p}
              </a>
            </li>
          ))}
        </ul>
        <More cursor={groups.next} loading={groups.loading} onMore={groups.more} testid="db-groups-more" />
      </div>
    </div>
  );
}

function Crumbs({ db, segs }) {
  return (
    <div class="crumbs mono" data-testid="data-crumbs">
      <a href={dataHref(db, '')}>{db}</a>
      {segs.map((s, i) => (
        <span key={i}>
          {' / '}
          <a href={dataHref(db, segs.slice(0, i + 1).join('/'))}>{s}</a>
        </span>
      ))}
    </div>
  );
}

export default function Data({ parts }) {
  const [db = '', ...segs] = parts;
  const path = segs.join('/');
  let body;
  if (!db) body = <p class="muted">Choose a database in the tree.</p>;
  else if (!path) body = <DatabaseView db={db} />;
  else if (segs.length % 2 === 1) body = <CollectionView db={db} path={path} />;
  else body = <DocumentView db={db} path={path} />;
  return (
    <>
      <Header title="Data">{db ? <Crumbs db={db} segs={segs} /> : null}</Header>
      <div class="cols">
        <div class="side panel data-side">
          <Tree current={{ db, path }} />
        </div>
        <div class="grow">{body}</div>
      </div>
    </>
  );
}
