// Placeholder until the query page lands (issue 17 slice in progress).
import { Header } from '../ui.jsx';

export default function Page() {
  return <Header title="query" />;
}
