// Package auth holds Loom's user accounts, tokens and API keys (README,
// "Users, keys and security rules"). Everything it stores is a system
// document written through collections.Store, so it works on every engine and
// never appears in the change log.
//
// # Basics
//
// A Service signs users up and logs them in (bcrypt password hashes), issues
// token pairs — a short-lived HS256 access JWT and an opaque, rotating refresh
// token — and resolves a bearer credential into an Identity: one of its own
// access tokens, an RS256/ES256 token of an external OIDC provider (when a
// JWKS URL is configured), or a service key.
//
// Stored documents, all in Config.DB:
//
//	_users/{uid}              {username, passwordHash, roles, createdAt}
//	_usernames/{name key}     {uid}          unique, case-insensitive name
//	_refresh_tokens/{sha256}  {uid, expiresAt}
//	_api_keys/{sha256}        {name, roles, createdAt}
//	_api_key_names/{name}     {hash}         unique service-key name
//	_console_sessions/{sha256 of the session id}
//	                          {uid, kind, createdAt, endsAt, expiresAt,
//	                           secret, prevSecret, rotatedAt}  (console.go)
//
// For the admin (listing.go): ListUsers pages through the accounts by name
// key, SetUserRoles replaces a user's roles, ListServiceKeys lists the keys;
// none of them returns a password hash, a key or its hash.
//
// Refresh tokens and service keys are stored only as the SHA-256 of the
// credential, so a copy of the database does not hand out working keys.
//
// # Caveats
//
// Access tokens are stateless: logout revokes the refresh token, but an
// access token stays valid until it expires (15 minutes by default), and
// so do the roles it carries. SetUserRoles revokes the user's refresh
// tokens and console sessions, so the user signs in again to get the new
// roles; until then the access tokens already issued keep the old ones.
//
// Login rate limiting is in memory and per process: counters are lost on
// restart and not shared between Loom instances.
package auth
