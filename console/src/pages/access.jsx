// Access: users and their roles, service keys, and the security rules file
// (README, "Users, keys and security rules").
import { Header } from '../ui.jsx';
import Users from './access-users.jsx';
import Keys from './access-keys.jsx';
import Rules from './access-rules.jsx';

export default function Access() {
  return (
    <>
      <Header title="Access" />
      <Users />
      <Keys />
      <Rules />
    </>
  );
}
