package main

import (
	"math"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/loomdb/loom/internal/config"
)

// The GC settings of loom serve: GOGC / GOMEMLIMIT over [runtime] over the
// defaults, and the default target only with a memory limit in force.
// decideGC is pure; applyGC, the one place that changes the process's
// collector, runs in loom serve only.
func TestDecideGC(t *testing.T) {
	const gib = int64(1) << 30
	none := int64(math.MaxInt64)
	cases := []struct {
		name  string
		rt    config.Runtime
		env   map[string]string
		avail int64
		want  gcSettings
	}{
		{"defaults", config.Runtime{}, nil, 8 * gib,
			gcSettings{Percent: 400, PercentFrom: "default", Limit: 4 * gib, LimitFrom: "default"}},
		{"memory unknown: Go's defaults", config.Runtime{}, nil, 0,
			gcSettings{Percent: 100, PercentFrom: "default", Limit: none, LimitFrom: "default"}},
		{"config", config.Runtime{GCPercent: 200, MemoryLimit: "1GiB"}, nil, 8 * gib,
			gcSettings{Percent: 200, PercentFrom: "[runtime] gc_percent", Limit: gib, LimitFrom: "[runtime] memory_limit"}},
		{"config share", config.Runtime{MemoryLimit: "25%"}, nil, 8 * gib,
			gcSettings{Percent: 400, PercentFrom: "default", Limit: 2 * gib, LimitFrom: "[runtime] memory_limit"}},
		{"config limit off: Go's target", config.Runtime{MemoryLimit: "off"}, nil, 8 * gib,
			gcSettings{Percent: 100, PercentFrom: "default", Limit: none, LimitFrom: "[runtime] memory_limit"}},
		{"config gc off", config.Runtime{GCPercent: -5}, nil, 8 * gib,
			gcSettings{Percent: -1, PercentFrom: "[runtime] gc_percent", Limit: 4 * gib, LimitFrom: "default"}},
		{"env over config", config.Runtime{GCPercent: 200, MemoryLimit: "1GiB"}, map[string]string{"GOGC": "50", "GOMEMLIMIT": "3GiB"}, 8 * gib,
			gcSettings{PercentFrom: "GOGC", Limit: none, LimitFrom: "GOMEMLIMIT"}},
		{"GOGC over default", config.Runtime{}, map[string]string{"GOGC": "100"}, 8 * gib,
			gcSettings{PercentFrom: "GOGC", Limit: 4 * gib, LimitFrom: "default"}},
		{"GOMEMLIMIT over default, default target", config.Runtime{}, map[string]string{"GOMEMLIMIT": "1GiB"}, 0,
			gcSettings{Percent: 400, PercentFrom: "default", Limit: none, LimitFrom: "GOMEMLIMIT"}},
		{"GOMEMLIMIT=off: Go's target", config.Runtime{}, map[string]string{"GOMEMLIMIT": "off"}, 8 * gib,
			gcSettings{Percent: 100, PercentFrom: "default", Limit: none, LimitFrom: "GOMEMLIMIT"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := decideGC(c.rt, func(k string) string { return c.env[k] }, c.avail)
			if err != nil || got != c.want {
				t.Fatalf("got %+v, %v; want %+v", got, err, c.want)
			}
		})
	}
	for _, c := range []struct {
		name  string
		rt    config.Runtime
		env   map[string]string
		avail int64
		want  string
	}{
		{"share of unknown memory", config.Runtime{MemoryLimit: "50%"}, nil, 0, "[runtime] memory_limit"},
		{"gc off without a limit", config.Runtime{GCPercent: -1}, map[string]string{"GOMEMLIMIT": "off"}, 8 * gib, "[runtime] gc_percent"},
		{"gc off, memory unknown", config.Runtime{GCPercent: -1}, nil, 0, "[runtime] gc_percent"},
	} {
		if _, err := decideGC(c.rt, func(k string) string { return c.env[k] }, c.avail); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err=%v, want one naming %s", c.name, err, c.want)
		}
	}
}

// The memory a share is of: the machine's, or its cgroup's limit when
// lower; an unlimited cgroup changes nothing.
func TestAvailableMemory(t *testing.T) {
	meminfo := &fstest.MapFile{Data: []byte("MemTotal:       16384000 kB\nMemFree:         1000 kB\n")}
	const total = int64(16384000) << 10
	cases := []struct {
		name string
		fs   fstest.MapFS
		want int64
	}{
		{"machine", fstest.MapFS{"proc/meminfo": meminfo}, total},
		{"not linux", fstest.MapFS{}, 0},
		{"v2 in a namespace", fstest.MapFS{"proc/meminfo": meminfo, "sys/fs/cgroup/memory.max": {Data: []byte("1073741824\n")}}, 1 << 30},
		{"v2 unlimited", fstest.MapFS{"proc/meminfo": meminfo, "sys/fs/cgroup/memory.max": {Data: []byte("max\n")}}, total},
		{"v2 own cgroup", fstest.MapFS{
			"proc/meminfo":     meminfo,
			"proc/self/cgroup": {Data: []byte("0::/system.slice/loom.service\n")},
			"sys/fs/cgroup/system.slice/loom.service/memory.max": {Data: []byte("536870912\n")},
		}, 512 << 20},
		{"v1 own cgroup", fstest.MapFS{
			"proc/meminfo":     meminfo,
			"proc/self/cgroup": {Data: []byte("5:cpu,cpuacct:/x\n4:memory:/docker/abc\n0::/\n")},
			"sys/fs/cgroup/memory/docker/abc/memory.limit_in_bytes": {Data: []byte("268435456\n")},
			"sys/fs/cgroup/memory/x/memory.limit_in_bytes":          {Data: []byte("1\n")},
		}, 256 << 20},
		{"v1", fstest.MapFS{"proc/meminfo": meminfo, "sys/fs/cgroup/memory/memory.limit_in_bytes": {Data: []byte("2147483648\n")}}, 2 << 30},
		{"v1 unlimited", fstest.MapFS{"proc/meminfo": meminfo, "sys/fs/cgroup/memory/memory.limit_in_bytes": {Data: []byte("9223372036854771712\n")}}, total},
		{"cgroup without meminfo", fstest.MapFS{"sys/fs/cgroup/memory.max": {Data: []byte("1073741824\n")}}, 0},
	}
	for _, c := range cases {
		if got := availableMemory(c.fs); got != c.want {
			t.Errorf("%s: availableMemory=%d, want %d", c.name, got, c.want)
		}
	}
}
