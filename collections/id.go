package collections

import "github.com/google/uuid"

// NewID returns a generated document id: a UUIDv7, so ids sort roughly by
// creation time.
func NewID() string {
	return uuid.Must(uuid.NewV7()).String()
}
