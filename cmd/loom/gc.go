package main

import (
	"bufio"
	"bytes"
	"fmt"
	"io/fs"
	"log/slog"
	"math"
	"path"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"

	"github.com/loomdb/loom/internal/config"
)

// gcSettings is what loom serve sets on the Go garbage collector, and where
// each value comes from. A value whose environment variable is set is left
// as the runtime read it at start.
type gcSettings struct {
	// Percent is the GC target (negative = off); not applied when
	// PercentFrom is "GOGC".
	Percent     int
	PercentFrom string
	// Limit is the soft memory limit in bytes (math.MaxInt64 = none); not
	// applied when LimitFrom is "GOMEMLIMIT".
	Limit     int64
	LimitFrom string
}

// Where a setting comes from.
const (
	fromGOGC       = "GOGC"
	fromGOMEMLIMIT = "GOMEMLIMIT"
	fromPercentKey = "[runtime] gc_percent"
	fromLimitKey   = "[runtime] memory_limit"
	fromDefault    = "default"
)

// decideGC picks the collector settings of loom serve: the environment
// (GOGC, GOMEMLIMIT) over [runtime] over the defaults. available is the
// memory the process may use (0 = unknown), which a share ("50%") is of.
// The default GC target (config.DefaultGCPercent) needs a memory limit in
// force: it trades memory for CPU, and the limit is what bounds that trade;
// without one the target stays Go's 100.
func decideGC(rt config.Runtime, getenv func(string) string, available int64) (gcSettings, error) {
	s := gcSettings{Limit: math.MaxInt64}
	limited := false
	if v := getenv("GOMEMLIMIT"); v != "" {
		s.LimitFrom, limited = fromGOMEMLIMIT, v != "off"
	} else {
		s.LimitFrom = fromDefault
		if rt.MemoryLimit != "" {
			s.LimitFrom = fromLimitKey
		}
		l, err := config.ParseMemoryLimit(rt.MemoryLimit)
		if err != nil {
			return gcSettings{}, err
		}
		switch {
		case l.Percent > 0 && available > 0:
			s.Limit, limited = available*int64(l.Percent)/100, true
		case l.Percent > 0 && s.LimitFrom == fromLimitKey:
			return gcSettings{}, fmt.Errorf("config: [runtime] memory_limit %q: the memory available could not be read; give a size (\"2GiB\")", rt.MemoryLimit)
		case l.Bytes > 0:
			s.Limit, limited = l.Bytes, true
		}
	}

	switch {
	case getenv("GOGC") != "":
		s.PercentFrom = fromGOGC
	case rt.GCPercent != 0:
		s.Percent, s.PercentFrom = max(rt.GCPercent, -1), fromPercentKey
		if s.Percent < 0 && !limited {
			return gcSettings{}, fmt.Errorf("config: [runtime] gc_percent is off but no memory limit is in force (memory_limit or GOMEMLIMIT): nothing would ever collect garbage")
		}
	case limited:
		s.Percent, s.PercentFrom = config.DefaultGCPercent, fromDefault
	default:
		s.Percent, s.PercentFrom = 100, fromDefault
	}
	return s, nil
}

// applyGC sets the collector as s says (the one place loom serve changes
// the process's GC) and logs the values in force.
func applyGC(logger *slog.Logger, s gcSettings, getenv func(string) string) {
	percent := getenv("GOGC")
	if s.PercentFrom != fromGOGC {
		debug.SetGCPercent(s.Percent)
		percent = strconv.Itoa(s.Percent)
		if s.Percent < 0 {
			percent = "off"
		}
	}
	if s.LimitFrom != fromGOMEMLIMIT {
		debug.SetMemoryLimit(s.Limit)
	}
	limit := "off"
	if l := debug.SetMemoryLimit(-1); l != math.MaxInt64 { // -1 reads it
		limit = fmt.Sprintf("%dMiB", l>>20)
	}
	logger.Info("go gc", "gc_percent", percent, "gc_percent_from", s.PercentFrom,
		"memory_limit", limit, "memory_limit_from", s.LimitFrom)
}

// availableMemory is the memory this process may use: the machine's
// (/proc/meminfo), or its cgroup's limit (v2 memory.max, v1
// memory.limit_in_bytes) when lower. 0 = unknown (not Linux). fsys is the
// root file system.
func availableMemory(fsys fs.FS) int64 {
	var avail int64
	lower := func(n int64) {
		if n > 0 && (avail == 0 || n < avail) {
			avail = n
		}
	}
	if b, err := fs.ReadFile(fsys, "proc/meminfo"); err == nil {
		sc := bufio.NewScanner(bytes.NewReader(b))
		for sc.Scan() {
			if f := strings.Fields(sc.Text()); len(f) == 3 && f[0] == "MemTotal:" && f[2] == "kB" {
				if n, err := strconv.ParseInt(f[1], 10, 64); err == nil {
					lower(n << 10)
				}
			}
		}
	}
	if avail == 0 {
		return 0 // a cgroup without its machine says nothing reliable
	}
	limits := []string{"sys/fs/cgroup/memory.max", "sys/fs/cgroup/memory/memory.limit_in_bytes"}
	if b, err := fs.ReadFile(fsys, "proc/self/cgroup"); err == nil {
		// Without a cgroup namespace the process's own cgroup is a
		// directory below the mount: "0::/path" (v2), "N:memory:/path" (v1).
		for line := range strings.Lines(string(b)) {
			f := strings.SplitN(strings.TrimSpace(line), ":", 3)
			if len(f) != 3 || f[2] == "/" {
				continue
			}
			switch {
			case f[0] == "0" && f[1] == "":
				limits = append(limits, path.Join("sys/fs/cgroup", f[2], "memory.max"))
			case slices.Contains(strings.Split(f[1], ","), "memory"):
				limits = append(limits, path.Join("sys/fs/cgroup/memory", f[2], "memory.limit_in_bytes"))
			}
		}
	}
	for _, f := range limits {
		// "max" (v2) or a huge number (v1) means no limit.
		if b, err := fs.ReadFile(fsys, f); err == nil {
			if n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64); err == nil {
				lower(n)
			}
		}
	}
	return avail
}
