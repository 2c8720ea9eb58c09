// The console: a sign-in gate, the navigation, and one page per route.
import { render } from 'preact';
import './style.css';
import { booting, resume, session, signOut } from './api.js';
import { href, route } from './router.js';
import SignIn from './pages/signin.jsx';
import Data from './pages/data.jsx';
import Query from './pages/query.jsx';
import Live from './pages/live.jsx';
import Triggers from './pages/triggers.jsx';
import Deliveries from './pages/deliveries.jsx';
import Agents from './pages/agents.jsx';
import Access from './pages/access.jsx';
import Health from './pages/health.jsx';

const pages = [
  { id: 'data', title: 'Data', component: Data },
  { id: 'query', title: 'Query', component: Query },
  { id: 'live', title: 'Live', component: Live },
  { id: 'triggers', title: 'Triggers', component: Triggers },
  { id: 'deliveries', title: 'Deliveries', component: Deliveries },
  { id: 'agents', title: 'Agent runs', component: Agents },
  { id: 'access', title: 'Access', component: Access },
  { id: 'health', title: 'Health', component: Health },
];

function Nav() {
  const current = route.value.page;
  return (
    <nav data-testid="nav">
      <div class="brand">Loom</div>
      <ul>
        {pages.map((p) => (
          <li key={p.id}>
            <a href={href(p.id)} class={p.id === current ? 'active' : ''} data-testid={`nav-${p.id}`}>
              {p.title}
            </a>
          </li>
        ))}
      </ul>
      <div class="who">
        <span data-testid="nav-user">{session.value.username}</span>
        <button class="link" data-testid="nav-signout" onClick={() => signOut()}>
          Sign out
        </button>
      </div>
    </nav>
  );
}

function App() {
  if (booting.value) return <div class="boot">Loading…</div>;
  if (!session.value) return <SignIn />;
  const { page, parts, params } = route.value;
  const p = pages.find((x) => x.id === page) || pages[0];
  const Page = p.component;
  return (
    <div class="shell">
      <Nav />
      <main data-testid={`page-${p.id}`}>
        <Page parts={parts} params={params} />
      </main>
    </div>
  );
}

render(<App />, document.getElementById('app'));
resume();
