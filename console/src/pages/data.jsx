// The Data page (#/data/<db>/<path…>): the tree on the left; on the right a
// collection's documents (odd number of segments) or one document (even).
import { Header } from '../ui.jsx';
import CollectionView from './data-collection.jsx';
import DocumentView from './data-document.jsx';
import Tree from './data-tree.jsx';
import { dataHref } from './data-util.jsx';

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
  else if (!path) body = <p class="muted">Choose a collection in the tree.</p>;
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
