package loom_test

import (
	"fmt"
	"maps"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/loomdb/loom/internal/config"
)

// There is no Docker here to run `docker compose config`: these tests parse
// docker-compose.yml (anchors and merge keys resolved, as Compose does) and
// check the deployment's shape, and that every Loom node's environment and
// the mounted configuration load with config.Load as loom serve would.

type composeFile struct {
	Services map[string]composeService `yaml:"services"`
	Volumes  map[string]any            `yaml:"volumes"`
	Networks map[string]struct {
		IPAM struct {
			Config []struct {
				Subnet string `yaml:"subnet"`
			} `yaml:"config"`
		} `yaml:"ipam"`
	} `yaml:"networks"`
}

type composeService struct {
	Image       string            `yaml:"image"`
	Build       any               `yaml:"build"`
	Command     []string          `yaml:"command"`
	Environment map[string]string `yaml:"environment"`
	Volumes     []string          `yaml:"volumes"`
	Ports       []string          `yaml:"ports"`
	DependsOn   map[string]struct {
		Condition string `yaml:"condition"`
	} `yaml:"depends_on"`
	Networks map[string]struct {
		Aliases     []string `yaml:"aliases"`
		IPv4Address string   `yaml:"ipv4_address"`
	} `yaml:"networks"`
	Healthcheck *struct {
		Test []string `yaml:"test"`
	} `yaml:"healthcheck"`
}

func readCompose(t *testing.T) composeFile {
	t.Helper()
	b, err := os.ReadFile("docker-compose.yml")
	if err != nil {
		t.Fatal(err)
	}
	var f composeFile
	if err := yaml.Unmarshal(b, &f); err != nil {
		t.Fatalf("docker-compose.yml: %v", err)
	}
	return f
}

// mountSource returns the host side of the service's volume mounted at
// target ("" if none).
func (s composeService) mountSource(target string) string {
	for _, v := range s.Volumes {
		parts := strings.Split(v, ":")
		if len(parts) >= 2 && parts[1] == target {
			return parts[0]
		}
	}
	return ""
}

// flagValue returns the value after flag in args ("" if absent).
func flagValue(args []string, flag string) string {
	if i := slices.Index(args, flag); i >= 0 && i+1 < len(args) {
		return args[i+1]
	}
	return ""
}

var composeVar = regexp.MustCompile(`\$\{([A-Z_][A-Z0-9_]*)(?:(:-|:\?)([^}]*))?\}`)

// interpolate substitutes ${VAR}, ${VAR:-default} and ${VAR:?error} from
// vars as Compose does, failing on an unset required variable.
func interpolate(s string, vars map[string]string) (string, error) {
	var err error
	out := composeVar.ReplaceAllStringFunc(s, func(m string) string {
		sub := composeVar.FindStringSubmatch(m)
		if v := vars[sub[1]]; v != "" {
			return v
		}
		switch sub[2] {
		case ":-":
			return sub[3]
		case ":?":
			err = fmt.Errorf("%s: %s", sub[1], sub[3])
		}
		return ""
	})
	return out, err
}

// sharedSettings are the variables every node must agree on.
var sharedSettings = []string{"LOOM_ADMIN_KEY", "LOOM_JWT_SECRET", "LOOM_CURSOR_KEY", "LOOM_WEBHOOK_SECRET"}

func TestCompose_ReplicaSet(t *testing.T) {
	f := readCompose(t)
	var members []string
	replSets := map[string]bool{}
	for name, s := range f.Services {
		if rs := flagValue(s.Command, "--replSet"); rs != "" {
			members = append(members, name)
			replSets[rs] = true
			if !strings.HasPrefix(s.Image, "mongo:") {
				t.Errorf("%s: image %q, want the official mongo image", name, s.Image)
			}
			if !slices.Contains(s.Command, "--bind_ip_all") {
				t.Errorf("%s: mongod without --bind_ip_all is unreachable from the other containers", name)
			}
			if s.Healthcheck == nil || !strings.Contains(strings.Join(s.Healthcheck.Test, " "), "ping") {
				t.Errorf("%s: no ping health check", name)
			}
			if _, ok := f.Volumes[s.mountSource("/data/db")]; !ok {
				t.Errorf("%s: /data/db on %q, want a named volume", name, s.mountSource("/data/db"))
			}
		}
	}
	slices.Sort(members)
	if len(members) != 3 || len(replSets) != 1 {
		t.Fatalf("replica set members %v in sets %v, want 3 members of one set", members, slices.Collect(maps.Keys(replSets)))
	}
	rs := slices.Collect(maps.Keys(replSets))[0]

	// The init service waits for every member, runs the script, and the
	// script initiates exactly those members, only when not yet initiated.
	init, ok := f.Services["mongo-init"]
	if !ok {
		t.Fatal("no mongo-init service")
	}
	for _, m := range members {
		if init.DependsOn[m].Condition != "service_healthy" {
			t.Errorf("mongo-init depends on %s with %q, want service_healthy", m, init.DependsOn[m].Condition)
		}
	}
	script := init.mountSource("/mongo-init.js")
	if script == "" || !slices.Contains(init.Command, "/mongo-init.js") {
		t.Fatalf("mongo-init mounts %q and runs %v, want it to run /mongo-init.js", script, init.Command)
	}
	b, err := os.ReadFile(strings.TrimPrefix(script, "./"))
	if err != nil {
		t.Fatal(err)
	}
	js := string(b)
	for _, want := range []string{`_id: "` + rs + `"`, "rs.initiate(", "NotYetInitialized", "PRIMARY", "quit(1)"} {
		if !strings.Contains(js, want) {
			t.Errorf("%s lacks %q", script, want)
		}
	}
	for _, m := range members {
		if !strings.Contains(js, `"`+m+`:27017"`) {
			t.Errorf("%s does not initiate member %s:27017", script, m)
		}
	}
}

func lookNodes(t *testing.T, f composeFile) []string {
	t.Helper()
	var nodes []string
	for name, s := range f.Services {
		if s.Environment["LOOM_ENGINE"] != "" {
			nodes = append(nodes, name)
		}
	}
	slices.Sort(nodes)
	if len(nodes) < 2 {
		t.Fatalf("Loom nodes %v, want at least 2", nodes)
	}
	return nodes
}

func TestCompose_LoomNodes(t *testing.T) {
	f := readCompose(t)
	nodes := lookNodes(t, f)
	first := f.Services[nodes[0]]
	dataVolumes := map[string]string{}
	for _, name := range nodes {
		s := f.Services[name]
		env := s.Environment
		if env["LOOM_ENGINE"] != "mongo" {
			t.Errorf("%s: LOOM_ENGINE=%q, want mongo", name, env["LOOM_ENGINE"])
		}
		uri := env["LOOM_MONGO_URI"]
		for _, m := range []string{"mongo1:27017", "mongo2:27017", "mongo3:27017", "replicaSet=rs0"} {
			if !strings.Contains(uri, m) {
				t.Errorf("%s: LOOM_MONGO_URI=%q lacks %s", name, uri, m)
			}
		}
		for _, k := range sharedSettings {
			if !regexp.MustCompile(`^\$\{` + k + `:\?`).MatchString(env[k]) {
				t.Errorf("%s: %s=%q, want the required variable ${%s:?...}, never a literal secret", name, k, env[k], k)
			}
			if env[k] != first.Environment[k] {
				t.Errorf("%s: %s differs from %s's", name, k, nodes[0])
			}
		}
		if s.DependsOn["mongo-init"].Condition != "service_completed_successfully" {
			t.Errorf("%s: starts before the replica set is initiated", name)
		}
		vol := s.mountSource("/data")
		if _, ok := f.Volumes[vol]; !ok {
			t.Errorf("%s: /data on %q, want a named volume", name, vol)
		} else if other, dup := dataVolumes[vol]; dup {
			t.Errorf("%s and %s share the data volume %s (one node id for two nodes)", name, other, vol)
		}
		dataVolumes[vol] = name
		if !slices.Contains(s.Networks["loom"].Aliases, "loom") {
			t.Errorf("%s: no network alias loom: the proxy would not find it", name)
		}
		if s.Build == nil && s.Image == "" {
			t.Errorf("%s: neither build nor image", name)
		}
		if s.Healthcheck == nil || !strings.Contains(strings.Join(s.Healthcheck.Test, " "), "/ready") {
			t.Errorf("%s: no /ready health check", name)
		}
	}
}

// Each node's environment, with .env filled in, and the mounted
// configuration load as loom serve loads them; without .env Compose refuses
// to start rather than run nodes with different generated secrets.
func TestCompose_NodeConfigLoads(t *testing.T) {
	f := readCompose(t)
	dotenv := map[string]string{
		"LOOM_ADMIN_KEY":      "loom_admin_test",
		"LOOM_JWT_SECRET":     strings.Repeat("j", 32),
		"LOOM_CURSOR_KEY":     strings.Repeat("c", 32),
		"LOOM_WEBHOOK_SECRET": "whsec_dGVzdA==",
	}
	for _, name := range lookNodes(t, f) {
		s := f.Services[name]
		mounted := s.Environment["LOOM_CONFIG"]
		src := strings.TrimPrefix(s.mountSource(mounted), "./")
		if src == "" {
			t.Fatalf("%s: LOOM_CONFIG=%q is not a mounted file", name, mounted)
		}
		env := map[string]string{}
		for k, v := range s.Environment {
			got, err := interpolate(v, dotenv)
			if err != nil {
				t.Fatalf("%s: %s: %v", name, k, err)
			}
			env[k] = got
		}
		env["LOOM_CONFIG"] = src
		cfg, err := config.Load(config.Flags{}, func(k string) string { return env[k] })
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if cfg.Engine != "mongo" || cfg.Mongo.Database == "" || len(cfg.MissingSharedSettings()) != 0 {
			t.Errorf("%s: engine=%q mongo=%+v missing=%v", name, cfg.Engine, cfg.Mongo, cfg.MissingSharedSettings())
		}
		if _, err := interpolate(s.Environment["LOOM_ADMIN_KEY"], nil); err == nil {
			t.Errorf("%s: starts without LOOM_ADMIN_KEY set", name)
		}
	}
}

func TestCompose_Proxy(t *testing.T) {
	f := readCompose(t)
	p, ok := f.Services["proxy"]
	if !ok {
		t.Fatal("no proxy service")
	}
	if !strings.HasPrefix(p.Image, "caddy:") {
		t.Errorf("proxy image %q, want caddy", p.Image)
	}
	if len(p.Ports) != 1 || !strings.HasSuffix(p.Ports[0], ":8080") {
		t.Errorf("proxy ports %v, want one published port onto :8080", p.Ports)
	}
	for _, n := range lookNodes(t, f) {
		if p.DependsOn[n].Condition != "service_healthy" {
			t.Errorf("proxy does not wait for %s to be healthy", n)
		}
	}
	b, err := os.ReadFile(strings.TrimPrefix(p.mountSource("/etc/caddy/Caddyfile"), "./"))
	if err != nil {
		t.Fatal(err)
	}
	caddy := string(b)
	for _, want := range []string{"dynamic a", "name loom", "port 8080", "flush_interval -1", "lb_try_duration"} {
		if !strings.Contains(caddy, want) {
			t.Errorf("Caddyfile lacks %q", want)
		}
	}
	// Loom trusts the proxy's forwarded client address, and only the
	// proxy's.
	ip := p.Networks["loom"].IPv4Address
	cfg, err := config.Load(config.Flags{Config: "deploy/loom.toml"}, func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	if ip == "" || !slices.Equal(cfg.Server.TrustedProxies, []string{ip}) {
		t.Errorf("proxy address %q, trusted_proxies %v: want exactly the proxy", ip, cfg.Server.TrustedProxies)
	}
}

func TestDockerfile(t *testing.T) {
	b, err := os.ReadFile("Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	d := string(b)
	for _, want := range []string{"FROM golang:1.26", "go build", "./cmd/loom", `ENTRYPOINT ["loom"]`, `CMD ["serve"]`, "LOOM_ADDR=0.0.0.0:8080", "HEALTHCHECK"} {
		if !strings.Contains(d, want) {
			t.Errorf("Dockerfile lacks %q", want)
		}
	}
}
