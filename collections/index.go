package collections

import "fmt"

// Index declares a secondary index an engine should build: equality and
// ordering on Fields, for documents of Collection (a concrete collection or a
// pattern with "*" segments). Indexes only make queries faster; results are
// the same without them.
type Index struct {
	Collection string   `toml:"collection" json:"collection"`
	Fields     []string `toml:"fields" json:"fields"`
}

// Validate checks the collection pattern and field names.
func (ix Index) Validate() error {
	if err := ValidateCollectionPattern(ix.Collection); err != nil {
		return fmt.Errorf("index on %q: %w", ix.Collection, err)
	}
	if len(ix.Fields) == 0 {
		return fmt.Errorf("index on %q: no fields", ix.Collection)
	}
	for _, f := range ix.Fields {
		if err := validateField(f); err != nil {
			return fmt.Errorf("index on %q: %w", ix.Collection, err)
		}
	}
	return nil
}
