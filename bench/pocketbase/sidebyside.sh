#!/usr/bin/env bash
# sidebyside.sh — Loom vs PocketBase, same machine, same load generator (issue 18).
#
# Usage:   bench/pocketbase/sidebyside.sh [loom-binary] [label]
#   loom-binary  default: `go build ./cmd/loom` of the repository this script sits in, built
#                into the work dir; label default: that checkout's `git describe --always --dirty`
#   Example: ROUNDS=1 DUR=2s SEED=20000 USEED=2000 bench/pocketbase/sidebyside.sh
# See bench/pocketbase/README.md. Not part of `make test` or CI.
#
# Unattended; stops with a clear message on the first failed step. Both servers are stopped on
# exit (also on error / Ctrl-C). Work dir ${WORK:-/tmp/loom-vs-pocketbase}; built there when
# missing (and then reused):
#   pbload      the load generator (bench/pocketbase/loadgen, its own stdlib-only Go module)
#   pocketbase  PocketBase v0.36.8 as a framework build (pocketbase.New().Start()); its main.go
#               and go.mod are written to pocketbase-src/ and `go get ...pocketbase@v0.36.8`
#               fetches it (network to the Go module proxy on the first build). Started with
#               --dev=false (under /tmp it would default to dev mode and log every SQL statement).
# Uses bench/pocketbase/loom.toml ([[index]] group on bench/*/items and users/*/items,
# [limits] rate_limit = -1). Needs go, curl, jq, python3, getconf on PATH and ports
# 127.0.0.1:8090 (PocketBase), :8091 (Loom) free.
#
# What it does:
#  1. fresh data dirs in $WORK/run-<label>/; starts PocketBase (superuser upsert,
#     batch enabled, collections `items` (superuser only, index on group) and `uitems`
#     (owner relation to users, index (owner, group), list/view rule owner = @request.auth.id,
#     create rule @request.auth.id != "" && owner = @request.auth.id), a `users` record + token)
#     and Loom (`loom serve -config loom.toml`, LOOM_ADMIN_KEY, a user via POST /auth/v1/signup);
#  2. seeds SEED docs (50 groups) per system for the admin/superuser collection
#     and USEED for the user's collection (Loom /batch, PocketBase /api/batch, 500 per batch);
#  3. admin first, then user: ROUNDS alternating rounds (Loom, PB) of create -> get -> query,
#     DUR per phase, CLIENTS keep-alive clients; `uptime` before each round;
#  4. per phase: req/s, non-2xx and transport-error counts, and the SERVER's CPU per request
#     (utime+stime of its PID from /proc/PID/stat before/after the phase, pbload -pid) and the
#     load generator's own CPU per request (/proc/self/stat of pbload, same phase bounds);
#     around each Loom run, Loom's commit batch size (/metrics loom_sqlite_commit_batch_requests);
#  5. a table per round + medians -> $WORK/results-<label>.md (raw output in run-<label>/).
#
# Ratios: throughput = Loom req/s / PB req/s; CPU = PB CPU us/req / Loom CPU us/req (both >1
# means Loom is better). CPU us/req does not depend on how the 2 cores are shared between the
# server, the generator and other work, so it is the robust one on a shared machine.
# A phase with any non-2xx answer or error is marked INVALID and left out of the medians.
#
# Env overrides: WORK (/tmp/loom-vs-pocketbase) ROUNDS (3) DUR (5s) CLIENTS (64) SEED (125000)
# USEED (5000) KEEP_DATA (0: the run dir's data dirs are deleted at the end; 1 keeps them).
set -euo pipefail

ROUNDS=${ROUNDS:-3}
DUR=${DUR:-5s}
CLIENTS=${CLIENTS:-64}
SEED=${SEED:-125000}
USEED=${USEED:-5000}
KEEP_DATA=${KEEP_DATA:-0}
PB_VERSION=v0.36.8

die() { echo "sidebyside: FAILED: $*" >&2; exit 1; }
log() { echo "[$(date -u +%H:%M:%S)] $*" >&2; }

for c in go curl jq python3 getconf git; do command -v $c >/dev/null || die "$c not on PATH"; done
export GOTOOLCHAIN=${GOTOOLCHAIN:-local}

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
WORK=${WORK:-/tmp/loom-vs-pocketbase}
mkdir -p "$WORK" || die "cannot create work dir $WORK"
WORK=$(cd "$WORK" && pwd)
CONF=$HERE/loom.toml
[[ -f $CONF ]] || die "$CONF missing"

if [[ $# -ge 1 ]]; then
	LOOM_BIN=$(readlink -f "$1")
	LABEL=${2:-$(basename "$LOOM_BIN")}
else
	LABEL=${2:-$(git -C "$REPO" describe --always --dirty 2>/dev/null || echo dev)}
	LOOM_BIN=$WORK/loom-$LABEL
	log "building loom from $REPO -> $LOOM_BIN"
	(cd "$REPO" && go build -o "$LOOM_BIN" ./cmd/loom) >"$WORK/loom-build.log" 2>&1 ||
		die "go build ./cmd/loom in $REPO: $(tail -5 "$WORK/loom-build.log")"
fi
LOOM_BIN=$(readlink -f "$LOOM_BIN")
[[ -x $LOOM_BIN ]] || die "loom binary $LOOM_BIN not executable"
[[ $LABEL =~ ^[A-Za-z0-9._-]+$ ]] || die "label '$LABEL' must be letters, digits, . _ -"

RUN=$WORK/run-$LABEL
OUT=$WORK/results-$LABEL.md
PB=http://127.0.0.1:8090
LM=http://127.0.0.1:8091
PBLOAD=$WORK/pbload
PBBIN=$WORK/pocketbase
PASS='Passw0rd-123456'
CLK=$(getconf CLK_TCK)

# The load generator: rebuilt when missing or older than its source.
if [[ ! -x $PBLOAD || $HERE/loadgen/main.go -nt $PBLOAD || $HERE/loadgen/go.mod -nt $PBLOAD ]]; then
	log "building the load generator -> $PBLOAD"
	(cd "$HERE/loadgen" && go build -o "$PBLOAD" .) >"$WORK/pbload-build.log" 2>&1 ||
		die "go build bench/pocketbase/loadgen: $(tail -5 "$WORK/pbload-build.log")"
fi
# PocketBase as a framework build; kept between runs (delete $PBBIN to rebuild).
if [[ ! -x $PBBIN ]]; then
	src=$WORK/pocketbase-src
	log "building PocketBase $PB_VERSION in $src (first run: fetches modules from the Go module proxy)"
	mkdir -p "$src"
	cat >"$src/main.go" <<'GO'
// PocketBase as a framework build, for bench/pocketbase/sidebyside.sh.
package main

import (
	"log"

	"github.com/pocketbase/pocketbase"
)

func main() {
	app := pocketbase.New()
	if err := app.Start(); err != nil {
		log.Fatal(err)
	}
}
GO
	printf 'module pbserver\n\ngo 1.25\n' >"$src/go.mod"
	rm -f "$src/go.sum"
	(cd "$src" && go get "github.com/pocketbase/pocketbase@$PB_VERSION" && go mod tidy &&
		CGO_ENABLED=0 go build -o "$PBBIN.tmp" . && mv "$PBBIN.tmp" "$PBBIN") >"$WORK/pocketbase-build.log" 2>&1 ||
		die "building PocketBase $PB_VERSION (network to the Go module proxy needed on the first build): $(tail -5 "$WORK/pocketbase-build.log")"
fi
[[ -x $PBBIN ]] || die "$PBBIN missing"
for port in 8090 8091; do
	if curl -s -o /dev/null --max-time 1 "http://127.0.0.1:$port/"; then die "port $port already in use (another server running?)"; fi
done

PB_PID= LOOM_PID=
stop() { # stop <pid> <name>
	local pid=$1 name=$2
	[[ -n $pid ]] && kill -0 "$pid" 2>/dev/null || return 0
	kill -TERM "$pid" 2>/dev/null || true
	for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || { log "stopped $name ($pid)"; return 0; }; sleep 0.2; done
	log "$name ($pid) did not stop in 10 s; KILL"; kill -KILL "$pid" 2>/dev/null || true
}
cleanup() {
	local rc=$?
	stop "$LOOM_PID" loom
	stop "$PB_PID" pocketbase
	if [[ $KEEP_DATA != 1 ]]; then rm -rf "$RUN/loomdata" "$RUN/pbdata"; fi
	[[ $rc == 0 ]] || echo "sidebyside: exited with status $rc; logs in $RUN" >&2
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# req <want-status> <method> <url> <auth-header-value|-> [json-body] -> body on stdout
req() {
	local want=$1 method=$2 url=$3 auth=$4 body=${5:-} code
	local args=(-s -o "$RUN/resp" -w '%{http_code}' -X "$method" -H 'Content-Type: application/json')
	[[ $auth != - ]] && args+=(-H "Authorization: $auth")
	[[ -n $body ]] && args+=(-d "$body")
	code=$(curl "${args[@]}" "$url") || die "$method $url: curl failed"
	[[ $code == "$want" ]] || die "$method $url: HTTP $code (want $want): $(head -c 500 "$RUN/resp")"
	cat "$RUN/resp"
}
wait_up() { # wait_up <url> <pid> <name> <logfile>
	for _ in $(seq 100); do
		kill -0 "$2" 2>/dev/null || die "$3 exited at start; log: $(tail -5 "$4")"
		curl -s -o /dev/null --max-time 1 -f "$1" && return 0
		sleep 0.2
	done
	die "$3 not answering $1 after 20 s"
}

rm -rf "$RUN"; mkdir -p "$RUN"
log "run dir $RUN; loom $LOOM_BIN; $(uptime)"

# ---- PocketBase ---------------------------------------------------------------------------
"$PBBIN" superuser upsert admin@example.com "$PASS" --dir "$RUN/pbdata" >"$RUN/pb-upsert.log" 2>&1 ||
	die "pocketbase superuser upsert: $(cat "$RUN/pb-upsert.log")"
# --dev=false: PocketBase defaults to dev mode (every SQL statement and request printed to the
# console) when its binary lives under os.TempDir() (it takes that for `go run`); the default work dir is.
(cd "$RUN" && exec "$PBBIN" serve --dev=false --http 127.0.0.1:8090 --dir "$RUN/pbdata") >"$RUN/pb.log" 2>&1 &
PB_PID=$!
wait_up "$PB/api/health" "$PB_PID" pocketbase "$RUN/pb.log"
[[ $(cat /proc/$PB_PID/comm) == pocketbase ]] || die "PB pid $PB_PID is $(cat /proc/$PB_PID/comm)"
PBTOK=$(req 200 POST "$PB/api/collections/_superusers/auth-with-password" - \
	"{\"identity\":\"admin@example.com\",\"password\":\"$PASS\"}" | jq -r .token)
[[ -n $PBTOK && $PBTOK != null ]] || die "no PocketBase superuser token"
req 200 PATCH "$PB/api/settings" "$PBTOK" '{"batch":{"enabled":true,"maxRequests":1000}}' >/dev/null
USERS_ID=$(req 200 GET "$PB/api/collections/users" "$PBTOK" | jq -r .id)
FIELDS='{"name":"group","type":"text"},{"name":"n","type":"number"},{"name":"worker","type":"number"},{"name":"text","type":"text"}'
req 200 POST "$PB/api/collections" "$PBTOK" "{\"name\":\"items\",\"type\":\"base\",\"fields\":[$FIELDS],
  \"indexes\":[\"CREATE INDEX idx_items_group ON items (\`group\`)\"],
  \"listRule\":null,\"viewRule\":null,\"createRule\":null,\"updateRule\":null,\"deleteRule\":null}" >/dev/null
req 200 POST "$PB/api/collections" "$PBTOK" "{\"name\":\"uitems\",\"type\":\"base\",\"fields\":[$FIELDS,
  {\"name\":\"owner\",\"type\":\"relation\",\"collectionId\":\"$USERS_ID\",\"maxSelect\":1}],
  \"indexes\":[\"CREATE INDEX idx_uitems_owner_group ON uitems (owner, \`group\`)\"],
  \"listRule\":\"owner = @request.auth.id\",\"viewRule\":\"owner = @request.auth.id\",
  \"createRule\":\"@request.auth.id != \\\"\\\" && owner = @request.auth.id\",
  \"updateRule\":null,\"deleteRule\":null}" >/dev/null
req 200 POST "$PB/api/collections/users/records" - \
	"{\"email\":\"user1@example.com\",\"password\":\"$PASS\",\"passwordConfirm\":\"$PASS\"}" >/dev/null
pb_user_login() {
	req 200 POST "$PB/api/collections/users/auth-with-password" - \
		"{\"identity\":\"user1@example.com\",\"password\":\"$PASS\"}" >"$RUN/pbuser.json"
	PBUTOK=$(jq -r .token "$RUN/pbuser.json"); PBUID=$(jq -r .record.id "$RUN/pbuser.json")
	[[ -n $PBUTOK && $PBUTOK != null && -n $PBUID && $PBUID != null ]] || die "no PocketBase user token"
}
pb_user_login
log "pocketbase pid $PB_PID up; user $PBUID"

# ---- Loom ---------------------------------------------------------------------------------
KEY=loom_bench_$(head -c 24 /dev/urandom | base64 | tr -dc 'A-Za-z0-9')
(cd "$RUN" && LOOM_ADMIN_KEY=$KEY exec "$LOOM_BIN" serve -config "$CONF" -data "$RUN/loomdata" \
	-addr 127.0.0.1:8091) >"$RUN/loom.log" 2>&1 &
LOOM_PID=$!
wait_up "$LM/health" "$LOOM_PID" loom "$RUN/loom.log"
[[ $(readlink -f /proc/$LOOM_PID/exe) == "$LOOM_BIN" ]] || die "Loom pid $LOOM_PID is $(readlink -f /proc/$LOOM_PID/exe)"
req 200 POST "$LM/auth/v1/signup" - "{\"username\":\"user1\",\"password\":\"$PASS\"}" >"$RUN/loomsignup.json"
loom_user_login() {
	req 200 POST "$LM/auth/v1/login" - "{\"username\":\"user1\",\"password\":\"$PASS\"}" >"$RUN/loomuser.json"
	LUTOK=$(jq -r .access_token "$RUN/loomuser.json")
	[[ -n $LUTOK && $LUTOK != null ]] || die "no Loom user token"
	# uid = the token's sub claim
	LUID=$(cut -d. -f2 <<<"$LUTOK" | tr '_-' '/+' | python3 -c 'import sys,base64,json;s=sys.stdin.read().strip();print(json.loads(base64.b64decode(s+"="*(-len(s)%4)))["sub"])')
	[[ -n $LUID ]] || die "no uid in the Loom user token"
}
loom_user_login
log "loom pid $LOOM_PID up; user $LUID"

# ---- seed ---------------------------------------------------------------------------------
seed() { # seed <name> <pbload args...>
	local name=$1; shift
	log "seeding $name"
	"$PBLOAD" "$@" -phases none >"$RUN/seed-$name.txt" 2>&1 || die "seed $name: $(tail -3 "$RUN/seed-$name.txt")"
	cat "$RUN/seed-$name.txt" >&2
}
seed loom-admin -target loom -url $LM -token "$KEY" -coll bench/r1/items -seed "$SEED"
seed pb-admin -target pb -url $PB -token "$PBTOK" -coll items -seed "$SEED"
seed loom-user -target loom -url $LM -token "$LUTOK" -coll "users/$LUID/items" -seed "$USEED"
seed pb-user -target pb -url $PB -token "$PBUTOK" -coll uitems -owner "$PBUID" -seed "$USEED"
n=$(req 200 GET "$PB/api/collections/items/records?perPage=1" "$PBTOK" | jq .totalItems)
[[ $n == "$SEED" ]] || die "PocketBase items holds $n records, want $SEED"
# The query shapes pbload uses must return a full page (20), or a phase would measure empty answers.
lq() { req 200 POST "$LM/api/v1/databases/default/query" "Bearer $1" \
	"{\"collection\":\"$2\",\"filters\":[{\"field\":\"group\",\"op\":\"==\",\"value\":\"g7\"}],\"limit\":20}" | jq '.docs|length'; }
pq() { req 200 GET "$PB/api/collections/$2/records?filter=group%3D%27g7%27&perPage=20&skipTotal=1" "$1" | jq '.items|length'; }
want() { local n=$(($1 / 50)); echo $((n < 20 ? n : 20)); } # docs of group g7 in a page of 20
for chk in "$(lq "$KEY" bench/r1/items) $(want "$SEED") loom-admin" "$(lq "$LUTOK" "users/$LUID/items") $(want "$USEED") loom-user" \
	"$(pq "$PBTOK" items) $(want "$SEED") pb-admin" "$(pq "$PBUTOK" uitems) $(want "$USEED") pb-user"; do
	read -r got exp name <<<"$chk"
	[[ $got == "$exp" ]] || die "sanity query $name returned $got docs, want $exp"
done
log "sanity queries return full pages on all four"

# ---- rounds -------------------------------------------------------------------------------
RES=$RUN/results.tsv
: >"$RES"
# Loom's commit batch histogram (sum, count) from /metrics; around each Loom pbload run, so the
# delta covers its create phase (get and query phases commit nothing).
loom_batch() { curl -s -H "Authorization: Bearer $KEY" "$LM/metrics" |
	awk '/^loom_sqlite_commit_batch_requests_sum/{s=$2} /^loom_sqlite_commit_batch_requests_count/{c=$2} END{printf "%s %s", s+0, c+0}'; }
run_one() { # run_one <role> <round> <target> <pid> <pbload args...>
	local role=$1 r=$2 t=$3 pid=$4; shift 4
	local f="$RUN/raw-$role-r$r-$t.txt" b0=
	[[ $t == loom ]] && b0=$(loom_batch)
	"$PBLOAD" "$@" -d "$DUR" -clients "$CLIENTS" -pid "$pid" -clktck "$CLK" >"$f" 2>&1 ||
		die "pbload $role round $r $t: $(tail -3 "$f")"
	kill -0 "$pid" 2>/dev/null || die "$t server died during $role round $r"
	grep -v '^RESULT' "$f" >&2
	local nres; nres=$(grep -c '^RESULT' "$f" || true)
	[[ $nres == 3 ]] || die "$role round $r $t: $nres phases ran, want 3 (see $f)"
	grep '^RESULT' "$f" | sed "s/^RESULT /RESULT role=$role round=$r /" >>"$RES"
	if [[ $t == loom ]]; then
		local b1; b1=$(loom_batch)
		read -r s0 c0 <<<"$b0"; read -r s1 c1 <<<"$b1"
		echo "BATCH role=$role round=$r sum=$(python3 -c "print(int(float($s1)-float($s0)))") count=$(python3 -c "print(int(float($c1)-float($c0)))")" >>"$RES"
		log "loom commit batches $role round $r: $(tail -1 "$RES")"
	fi
}
for role in admin user; do
	if [[ $role == user ]]; then pb_user_login; loom_user_login; fi # fresh tokens (Loom's last 15 min)
	for r in $(seq "$ROUNDS"); do
		up=$(uptime)
		log "$role round $r: $up"
		echo "LOAD role=$role round=$r time=$(date -u +%H:%M:%S) uptime=${up#*load average: }" >>"$RES"
		if [[ $role == admin ]]; then
			run_one admin "$r" loom "$LOOM_PID" -target loom -url $LM -token "$KEY" -coll bench/r1/items
			run_one admin "$r" pb "$PB_PID" -target pb -url $PB -token "$PBTOK" -coll items
		else
			run_one user "$r" loom "$LOOM_PID" -target loom -url $LM -token "$LUTOK" -coll "users/$LUID/items"
			run_one user "$r" pb "$PB_PID" -target pb -url $PB -token "$PBUTOK" -coll uitems -owner "$PBUID"
		fi
	done
done

# ---- report -------------------------------------------------------------------------------
python3 - "$RES" "$OUT" "$LABEL" "$LOOM_BIN" "$DUR" "$CLIENTS" "$SEED" "$USEED" <<'PY'
import sys, statistics as st
res, out, label, loom, dur, clients, seed, useed = sys.argv[1:]
rows, loads, batches = {}, {}, {}
for line in open(res):
    kind, *kv = line.split()
    d = dict(x.split("=", 1) for x in kv if "=" in x)
    if kind == "BATCH":
        batches[(d["role"], d["round"])] = (int(d["sum"]), int(d["count"])); continue
    if kind == "LOAD":
        loads[(d["role"], d["round"])] = (d["time"], line.split("uptime=", 1)[1].strip())
    else:
        rows[(d["role"], d["round"], d["target"], d["phase"])] = d
f = lambda k, d: float(d[k])
def bad(d): return int(d["non2xx"]) + int(d["errs"]) > 0
def fmt(x, p=0): return "—" if x is None else f"{x:,.{p}f}"
L = [f"# Loom vs PocketBase side by side — {label}", "",
     f"Loom binary `{loom}`; PocketBase v0.36.8; {dur} per phase, {clients} clients; seeded {seed} docs "
     f"(50 groups) admin, {useed} user. Throughput ratio = Loom/PB req/s; CPU ratio = PB/Loom server CPU µs "
     f"per request (both > 1: Loom better). gen = load generator's own CPU µs/req (Loom / PB). "
     f"INVALID = non-2xx or errors in that phase (left out of the medians).", ""]
hdr = ("| phase | Loom req/s | PB req/s | ratio | Loom CPU µs/req | PB CPU µs/req | CPU ratio | "
       "Loom/PB server cores | gen µs/req L/PB | non-2xx+err L/PB |")
sep = "|" + "---|" * 10
med = {}
for role in ("admin", "user"):
    rounds = sorted({k[1] for k in rows if k[0] == role}, key=int)
    for r in rounds:
        t, up = loads[(role, r)]
        l1 = float(up.split(",")[0])
        L += [f"## {role} round {r} — {t} UTC, load {up}" + ("  **(load > 3: noisy)**" if l1 > 3 else ""), "", hdr, sep]
        for ph in ("create", "get", "query"):
            a, b = rows.get((role, r, "loom", ph)), rows.get((role, r, "pb", ph))
            if not a or not b:
                L.append(f"| {ph} | missing | | | | | | | | |"); continue
            inv = bad(a) or bad(b)
            tr = f("rps", a) / f("rps", b) if f("rps", b) > 0 else None
            ca, cb = f("srv_cpu_us_per_req", a), f("srv_cpu_us_per_req", b)
            cr = cb / ca if ca > 0 and cb > 0 else None
            if not inv:
                m = med.setdefault((role, ph), {"la": [], "pa": [], "tr": [], "lc": [], "pc": [], "cr": []})
                m["la"].append(f("rps", a)); m["pa"].append(f("rps", b)); m["lc"].append(ca); m["pc"].append(cb)
                if tr: m["tr"].append(tr)
                if cr: m["cr"].append(cr)
            L.append(f"| {ph}{' **INVALID**' if inv else ''} | {fmt(f('rps', a))} | {fmt(f('rps', b))} | "
                     f"{fmt(tr, 2)}× | {fmt(ca)} | {fmt(cb)} | {fmt(cr, 2)}× | {a['srv_cores']} / {b['srv_cores']} | "
                     f"{a['gen_cpu_us_per_req']} / {b['gen_cpu_us_per_req']} | "
                     f"{int(a['non2xx'])+int(a['errs'])} / {int(b['non2xx'])+int(b['errs'])} |")
        L.append("")
L += ["## Medians (valid rounds only; ratios = median of the per-round ratios)", "",
      "| role | phase | Loom req/s | PB req/s | ratio | Loom CPU µs/req | PB CPU µs/req | CPU ratio | rounds |",
      "|" + "---|" * 9]
for role in ("admin", "user"):
    for ph in ("create", "get", "query"):
        m = med.get((role, ph))
        if not m:
            L.append(f"| {role} | {ph} | no valid round | | | | | | 0 |"); continue
        md = lambda k: st.median(m[k]) if m[k] else None
        L.append(f"| {role} | {ph} | {fmt(md('la'))} | {fmt(md('pa'))} | **{fmt(md('tr'), 2)}×** | {fmt(md('lc'))} | "
                 f"{fmt(md('pc'))} | **{fmt(md('cr'), 2)}×** | {len(m['la'])} |")
L.append("")
if batches:
    L += ["## Loom commit batches during its pbload runs (create phase; /metrics loom_sqlite_commit_batch_requests sum/count delta)", "",
          "| role | round | requests | commits | mean batch |", "|---|---|---|---|---|"]
    for (role, r), (s_, c_) in sorted(batches.items()):
        L.append(f"| {role} | {r} | {s_:,} | {c_:,} | {s_ / c_ if c_ else 0:.2f} |")
    L.append("")
open(out, "w").write("\n".join(L))
print("\n".join(L))
PY
log "results written to $OUT (raw: $RUN)"
