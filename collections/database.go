package collections

// MaxDatabaseName bounds a database name, in bytes.
const MaxDatabaseName = 64

// ValidDatabase reports whether name is a database name: 1 to
// MaxDatabaseName characters of [A-Za-z0-9_-]. The server applies it to the
// {db} URL segment and triggers to a definition's database, so both accept
// exactly the same names.
func ValidDatabase(name string) bool {
	if name == "" || len(name) > MaxDatabaseName {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '_', c == '-':
		default:
			return false
		}
	}
	return true
}
