package config

import (
	"fmt"
	"strconv"
	"strings"
)

// Runtime tunes the Go garbage collector of loom serve ([runtime]). The
// environment variables GOGC and GOMEMLIMIT, when set, win over both keys.
type Runtime struct {
	// GCPercent is the GC target, as GOGC: the heap may grow by this
	// percentage of the live heap before a collection. 0 = the default
	// (DefaultGCPercent while a memory limit is in force, else Go's 100);
	// negative = off (collect only near the memory limit, which must then
	// be in force); else MinGCPercent to MaxGCPercent.
	GCPercent int `toml:"gc_percent"`
	// MemoryLimit is the soft memory limit of the Go runtime, as
	// GOMEMLIMIT: a size in GOMEMLIMIT's syntax ("1536MiB", "2GiB"), a
	// share of the memory available ("50%": the machine's, or its cgroup's
	// limit when lower), or "off". Empty = DefaultMemoryLimit.
	MemoryLimit string `toml:"memory_limit"`
}

// The defaults and bounds of [runtime].
const (
	DefaultGCPercent   = 400
	MinGCPercent       = 10
	MaxGCPercent       = 10_000
	DefaultMemoryLimit = "50%"
	// MinMemoryLimit catches a size written without its unit ("512" is
	// bytes): below it the collector would run without pause.
	MinMemoryLimit = 64 << 20
)

// MemoryLimit is a parsed [runtime] memory_limit: Off, a share of the
// memory available (Percent, 1–100) or Bytes.
type MemoryLimit struct {
	Off     bool
	Percent int
	Bytes   int64
}

// ParseMemoryLimit reads a memory_limit value ("" = DefaultMemoryLimit).
func ParseMemoryLimit(s string) (MemoryLimit, error) {
	if s == "" {
		s = DefaultMemoryLimit
	}
	if s == "off" {
		return MemoryLimit{Off: true}, nil
	}
	if p, ok := strings.CutSuffix(s, "%"); ok {
		n, err := strconv.Atoi(p)
		if err != nil || n < 1 || n > 100 {
			return MemoryLimit{}, fmt.Errorf("config: [runtime] memory_limit %q: a share must be a whole percentage from 1%% to 100%%", s)
		}
		return MemoryLimit{Percent: n}, nil
	}
	n, err := ParseBytes(s)
	if err != nil {
		return MemoryLimit{}, fmt.Errorf("config: [runtime] memory_limit %q: use a size (\"2GiB\"), a share of memory (\"50%%\") or \"off\"", s)
	}
	if n < MinMemoryLimit {
		return MemoryLimit{}, fmt.Errorf("config: [runtime] memory_limit %q is %d bytes, must be at least 64MiB (sizes take a unit: B, KiB, MiB, GiB, TiB)", s, n)
	}
	return MemoryLimit{Bytes: n}, nil
}

// ParseBytes reads a size in GOMEMLIMIT's syntax: a whole number with an
// optional unit B, KiB, MiB, GiB or TiB.
func ParseBytes(s string) (int64, error) {
	units := []struct {
		suffix string
		shift  uint
	}{{"TiB", 40}, {"GiB", 30}, {"MiB", 20}, {"KiB", 10}, {"B", 0}}
	num, shift := s, uint(0)
	for _, u := range units {
		if v, ok := strings.CutSuffix(s, u.suffix); ok {
			num, shift = v, u.shift
			break
		}
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil || n < 0 || n > (1<<63-1)>>shift {
		return 0, fmt.Errorf("size %q: want a whole number with an optional unit B, KiB, MiB, GiB or TiB", s)
	}
	return n << shift, nil
}

func (r Runtime) validate() error {
	if n := r.GCPercent; n > 0 && (n < MinGCPercent || n > MaxGCPercent) {
		return fmt.Errorf("config: [runtime] gc_percent must be between %d and %d (0: the default, %d; negative: off), got %d", MinGCPercent, MaxGCPercent, DefaultGCPercent, n)
	}
	l, err := ParseMemoryLimit(r.MemoryLimit)
	if err != nil {
		return err
	}
	if r.GCPercent < 0 && l.Off {
		return fmt.Errorf("config: [runtime] gc_percent is off and memory_limit is \"off\": nothing would ever collect garbage; set a memory_limit")
	}
	return nil
}
