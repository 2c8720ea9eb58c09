package auth_test

import (
	"context"
	"testing"
)

// BenchmarkAuthenticate: Authenticate of one of the service's access
// tokens presented again and again (as every request of a signed-in user
// does), and of a console admin-key session token.
func BenchmarkAuthenticate(b *testing.B) {
	s, _, _ := MustNew(b, nil)
	ctx := context.Background()
	user := MustSignup(b, s, "bench").AccessToken
	cs, err := s.StartConsoleSessionWithAdminKey(ctx, adminKey, adminKeyHash, "")
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct{ name, bearer string }{{"user", "Bearer " + user}, {"console", "Bearer " + cs.AccessToken}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := s.Authenticate(ctx, c.bearer); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
