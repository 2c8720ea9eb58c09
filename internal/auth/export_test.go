package auth

// VerifiedCacheLen is the number of access tokens s has cached as verified.
func VerifiedCacheLen(s *Service) int { return s.verified.len() }

// SetVerifiedCacheSize replaces s's verified-token cache by an empty one
// holding at most n tokens (call before s is used concurrently).
func SetVerifiedCacheSize(s *Service, n int) { s.verified = newVerifiedCache(n) }
