#!/usr/bin/env bash
# Real network, real processes: `simsync-server` in one network namespace, the sandbox's `join`
# clients in three others, all joined by veth pairs to a bridge, each client's link shaped with
# delay, jitter and loss (then cut), and checks that the clients still agree. docs/netem.md
# describes the scenarios, the links and the results measured.
#
# usage: scripts/netem.sh [--shaper auto|netem|nfqueue] [--only NAME[,NAME...]] [--no-install]
#                         [--keep-logs]
#   --shaper      how links are shaped (default $NETEM_SHAPER, else auto):
#                   netem    `tc qdisc ... netem` on both ends of each client's veth pair;
#                   nfqueue  scripts/netem_shaper.py, the same delay, jitter and loss applied in
#                            user space to the bridge's forwarded packets (iptables NFQUEUE), for
#                            kernels built without sch_netem;
#                   auto     netem when the kernel has it, else nfqueue.
#   --only        run only these scenarios: 150ms-5pct 300ms-10pct cut-3s kill-9-rejoin
#                 sigterm-drain ownership-3
#   --no-install  never call apt-get (skip when a tool is missing)
#   --keep-logs   keep the log directory even when every scenario passed
# SIMSYNC_SERVER_BIN and SANDBOX_BIN name prebuilt release binaries; otherwise they are built
# (`cargo build --ignore-rust-version --release`, under $CARGO_TARGET_DIR or target/). Run as root, from anywhere (the
# sandbox is started from the repository root: it reads assets/).
# Installs iproute2, curl, python3, kmod or iptables from Debian's packages with apt-get when
# missing. Exit 0: every scenario passed; 1: one failed (its logs are printed), a build failed
# or an argument is wrong; 2: skipped, the machine cannot do it (not root, no network
# namespaces, no way to shape a link), with the reason as `netem: skipped: <reason>`.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
ROOT=$PWD

SCENARIOS="150ms-5pct 300ms-10pct cut-3s kill-9-rejoin sigterm-drain ownership-3"
shaper_mode=${NETEM_SHAPER:-auto}
only=""
install=1
keep_logs=0
while [ $# -gt 0 ]; do
    case "$1" in
        --shaper) shaper_mode="$2"; shift ;;
        --only) only="${2//,/ }"; shift ;;
        --no-install) install=0 ;;
        --keep-logs) keep_logs=1 ;;
        *) sed -n '7,25p' "$0" >&2; exit 1 ;;
    esac
    shift
done
case "$shaper_mode" in auto | netem | nfqueue) ;; *) echo "netem: --shaper auto|netem|nfqueue" >&2; exit 1 ;; esac
for name in $only; do
    [[ " $SCENARIOS " == *" $name "* ]] || { echo "netem: no scenario $name (of: $SCENARIOS)" >&2; exit 1; }
done

say() { echo "netem: $*"; }
skip() { echo "netem: skipped: $*"; exit 2; }

# Names of this script's namespaces and devices (a stale run's are removed first).
NS_BR=ssync-br
NS_SRV=ssync-srv
CLIENTS="c1 c2 c3"
PROBE_NS=ssync-probe
BRIDGE=ssbr0
SERVER_IP=10.77.0.1
declare -A CLIENT_IP=([c1]=10.77.0.11 [c2]=10.77.0.12 [c3]=10.77.0.13)
declare -A QUEUE_UP=([c1]=11 [c2]=12 [c3]=13)   # nfqueue: client -> bridge
declare -A QUEUE_DOWN=([c1]=21 [c2]=22 [c3]=23) # nfqueue: bridge -> client
GAME_PORT=7777
OPS=http://127.0.0.1:8080

# ---------------------------------------------------------------------------------------------
# Prerequisites
# ---------------------------------------------------------------------------------------------

[ "$(id -u)" = 0 ] || skip "not root (network namespaces, veth pairs and qdiscs need root)"

apt_updated=0
apt_install() {
    [ "$install" = 1 ] || return 1
    command -v apt-get >/dev/null || return 1
    say "apt-get install $*"
    if [ "$apt_updated" = 0 ]; then
        apt-get update -qq >/dev/null 2>&1 || return 1
        apt_updated=1
    fi
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null 2>&1
}

missing=()
command -v ip >/dev/null && command -v tc >/dev/null || missing+=(iproute2)
command -v curl >/dev/null || missing+=(curl)
command -v python3 >/dev/null || missing+=(python3)
command -v timeout >/dev/null || missing+=(coreutils)
if [ ${#missing[@]} -gt 0 ]; then
    apt_install "${missing[@]}" || skip "missing ${missing[*]} and could not install them (apt-get)"
fi

# Removes every namespace of this script, ending the processes still in them (this script's:
# the names are its own).
remove_namespaces() {
    local ns pids
    for ns in "$PROBE_NS" "$NS_SRV" ssync-c1 ssync-c2 ssync-c3 "$NS_BR"; do
        [ -e "/var/run/netns/$ns" ] || continue
        pids=$(ip netns pids "$ns" 2>/dev/null)
        # shellcheck disable=SC2086
        [ -n "$pids" ] && kill -9 $pids 2>/dev/null
        ip netns del "$ns" 2>/dev/null
    done
}
remove_namespaces

probe_err=$(mktemp)
ip netns add "$PROBE_NS" 2>"$probe_err" || skip "ip netns add failed: $(head -c 300 "$probe_err")"
if ! ip -n "$PROBE_NS" link add name pa type veth peer name pb 2>"$probe_err"; then
    ip netns del "$PROBE_NS"
    skip "cannot make a veth pair: $(head -c 300 "$probe_err")"
fi
ip -n "$PROBE_NS" link set pa up && ip -n "$PROBE_NS" link set pb up

netem_works() {
    ip netns exec "$PROBE_NS" tc qdisc replace dev pa root netem delay 1ms 1ms loss 1% \
        2>"$probe_err" || return 1
    ip netns exec "$PROBE_NS" tc qdisc del dev pa root 2>/dev/null
}
netem_reason=""
if [ "$shaper_mode" != nfqueue ] && ! netem_works; then
    netem_reason="tc netem: $(tr '\n' ' ' <"$probe_err")"
    if ! command -v modprobe >/dev/null; then
        apt_install kmod || true
    fi
    if command -v modprobe >/dev/null; then
        if modprobe sch_netem 2>"$probe_err" && netem_works; then
            netem_reason=""
        else
            netem_reason="$netem_reason; modprobe sch_netem: $(tr '\n' ' ' <"$probe_err")"
        fi
    else
        netem_reason="$netem_reason; no modprobe"
    fi
fi

IPT=iptables-legacy
nfqueue_works() {
    if ! command -v "$IPT" >/dev/null; then
        apt_install iptables || { echo "no $IPT" >"$probe_err"; return 1; }
        command -v "$IPT" >/dev/null || { echo "no $IPT after installing iptables" >"$probe_err"; return 1; }
    fi
    ip -n "$PROBE_NS" link add name pbr type bridge 2>"$probe_err" || return 1
    ip -n "$PROBE_NS" link set pa master pbr 2>"$probe_err" || return 1
    ip netns exec "$PROBE_NS" sysctl -qw net.bridge.bridge-nf-call-iptables=1 2>"$probe_err" || return 1
    ip netns exec "$PROBE_NS" "$IPT" -A FORWARD -m physdev --physdev-in pa -j NFQUEUE \
        --queue-num 9 2>"$probe_err" || return 1
    local out pid
    out=$(mktemp)
    ip netns exec "$PROBE_NS" python3 "$ROOT/scripts/netem_shaper.py" --queue 9:0:0:0 \
        >"$out" 2>"$probe_err" &
    pid=$!
    for _ in $(seq 30); do
        grep -q bound "$out" && break
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    grep -q bound "$out"
    local bound=$?
    kill "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
    rm -f "$out"
    return $bound
}
nfqueue_reason=""
if [ "$shaper_mode" = nfqueue ] || { [ "$shaper_mode" = auto ] && [ -n "$netem_reason" ]; }; then
    nfqueue_works || nfqueue_reason="nfqueue: $(tr '\n' ' ' <"$probe_err")"
fi
ip netns del "$PROBE_NS"
rm -f "$probe_err"

case "$shaper_mode" in
    netem) [ -z "$netem_reason" ] || skip "$netem_reason"; SHAPER=netem ;;
    nfqueue) [ -z "$nfqueue_reason" ] || skip "$nfqueue_reason"; SHAPER=nfqueue ;;
    auto)
        if [ -z "$netem_reason" ]; then
            SHAPER=netem
        elif [ -z "$nfqueue_reason" ]; then
            SHAPER=nfqueue
            say "the kernel has no netem ($netem_reason); shaping with scripts/netem_shaper.py (NFQUEUE) instead"
        else
            skip "no way to shape a link: $netem_reason; $nfqueue_reason"
        fi
        ;;
esac
say "shaper: $SHAPER"

# ---------------------------------------------------------------------------------------------
# Binaries
# ---------------------------------------------------------------------------------------------

target=${CARGO_TARGET_DIR:-$ROOT/target}
case "$target" in /*) ;; *) target=$ROOT/$target ;; esac
if [ -z "${SIMSYNC_SERVER_BIN:-}" ]; then
    cargo build --ignore-rust-version --release -p simsync_server || { say "FAIL: cargo build -p simsync_server"; exit 1; }
    SIMSYNC_SERVER_BIN=$target/release/simsync-server
fi
if [ -z "${SANDBOX_BIN:-}" ]; then
    cargo build --ignore-rust-version --release --example sandbox || { say "FAIL: cargo build --example sandbox"; exit 1; }
    SANDBOX_BIN=$target/release/examples/sandbox
fi
[ -x "$SIMSYNC_SERVER_BIN" ] || { say "FAIL: no server binary at $SIMSYNC_SERVER_BIN"; exit 1; }
[ -x "$SANDBOX_BIN" ] || { say "FAIL: no sandbox binary at $SANDBOX_BIN"; exit 1; }

# ---------------------------------------------------------------------------------------------
# Processes: every one in the background, each with a deadline; the trap ends what is left.
# ---------------------------------------------------------------------------------------------

LOGS=$(mktemp -d /tmp/simsync-netem.XXXXXX)
# Copies, so that a build during the run cannot swap the binaries under it.
mkdir -p "$LOGS/bin"
if ! { cp "$SIMSYNC_SERVER_BIN" "$LOGS/bin/simsync-server" && cp "$SANDBOX_BIN" "$LOGS/bin/sandbox"; }; then
    say "FAIL: cannot copy the binaries to $LOGS/bin"
    exit 1
fi
SERVER=$LOGS/bin/simsync-server
SANDBOX=$LOGS/bin/sandbox
export NO_COLOR=1 # plain log lines (tracing-subscriber honours it)
declare -A PID=() RC=()
SHAPER_PID=""

# start NAME NAMESPACE COMMAND...: runs COMMAND in NAMESPACE from the repository root, output
# to $DIR/NAME.log.
start() {
    local name=$1 ns=$2
    shift 2
    (cd "$ROOT" && exec ip netns exec "$ns" "$@") >"$DIR/$name.log" 2>&1 &
    PID[$name]=$!
    RC[$name]=running
}

# await NAME SECONDS: waits for NAME to exit, at most SECONDS (then kills it: RC "timeout");
# RC[NAME] is its exit status.
await() {
    local name=$1 end=$((SECONDS + $2)) pid=${PID[$1]}
    while kill -0 "$pid" 2>/dev/null; do
        if [ "$SECONDS" -ge "$end" ]; then
            kill -9 "$pid" 2>/dev/null
            wait "$pid" 2>/dev/null
            RC[$name]=timeout
            return 1
        fi
        sleep 0.1
    done
    wait "$pid"
    RC[$name]=$?
    [ "${RC[$name]}" = 0 ]
}

# Kills every process of the scenario still running.
stop_all() {
    local name
    for name in "${!PID[@]}"; do
        if [ "${RC[$name]}" = running ] && kill -0 "${PID[$name]}" 2>/dev/null; then
            kill -9 "${PID[$name]}" 2>/dev/null
            wait "${PID[$name]}" 2>/dev/null
            RC[$name]=killed
        fi
    done
    stop_shaper
}

cleanup() {
    stop_all 2>/dev/null
    remove_namespaces
    [ -n "${LOGS:-}" ] && rm -rf "${LOGS:?}/bin"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# ---------------------------------------------------------------------------------------------
# The network: a bridge in ssync-br; the server and the clients in their namespaces, each on a
# veth pair whose other end is a bridge port (b-srv, b-c1, ...).
# ---------------------------------------------------------------------------------------------

setup_network() {
    local ns n ip
    for ns in "$NS_BR" "$NS_SRV" ssync-c1 ssync-c2 ssync-c3; do
        ip netns add "$ns" || return 1
        ip -n "$ns" link set lo up || return 1
        ip netns exec "$ns" sysctl -qw net.ipv6.conf.all.disable_ipv6=1 2>/dev/null
        ip netns exec "$ns" sysctl -qw net.ipv6.conf.default.disable_ipv6=1 2>/dev/null
    done
    ip -n "$NS_BR" link add name "$BRIDGE" type bridge forward_delay 0 || return 1
    ip -n "$NS_BR" link set "$BRIDGE" up || return 1
    for n in srv $CLIENTS; do
        if [ "$n" = srv ]; then ip=$SERVER_IP; else ip=${CLIENT_IP[$n]}; fi
        ip -n "$NS_BR" link add name "b-$n" type veth peer name eth0 netns "ssync-$n" || return 1
        ip -n "$NS_BR" link set "b-$n" master "$BRIDGE" up || return 1
        ip -n "ssync-$n" addr add "$ip/24" dev eth0 || return 1
        ip -n "ssync-$n" link set eth0 up || return 1
    done
    if [ "$SHAPER" = nfqueue ]; then
        ip netns exec "$NS_BR" sysctl -qw net.bridge.bridge-nf-call-iptables=1 || return 1
        for n in $CLIENTS; do
            ip netns exec "$NS_BR" "$IPT" -A FORWARD -m physdev --physdev-in "b-$n" \
                -j NFQUEUE --queue-num "${QUEUE_UP[$n]}" || return 1
            ip netns exec "$NS_BR" "$IPT" -A FORWARD -m physdev --physdev-out "b-$n" \
                -j NFQUEUE --queue-num "${QUEUE_DOWN[$n]}" || return 1
        done
    fi
}

# One-way numbers of a round trip: half the delay and jitter each way, and the loss p per
# direction with 1 - (1 - p)^2 = the round trip's loss. Prints "DELAY_MS JITTER_MS LOSS_PERCENT".
one_way() {
    python3 -c "import math,sys; r,j,l=map(float,sys.argv[1:]); \
print(f'{r/2:g} {j/2:g} {100*(1-math.sqrt(1-l/100)):.3f}')" "$1" "$2" "$3"
}

declare -A LINK=()   # client -> "DELAY JITTER LOSS" one way
# shape CLIENT RTT_MS RTT_JITTER_MS ROUND_TRIP_LOSS_PERCENT: the client's link, both ways.
shape() {
    local c=$1 d j l
    read -r d j l < <(one_way "$2" "$3" "$4")
    LINK[$c]="$d $j $l"
    if [ "$SHAPER" = netem ]; then
        netem_set "$c" "$l"
    fi
}

netem_set() {
    local c=$1 loss=$2 d j
    read -r d j _ <<<"${LINK[$c]}"
    ip netns exec "ssync-$c" tc qdisc replace dev eth0 root netem delay "${d}ms" "${j}ms" \
        loss "${loss}%" &&
        ip netns exec "$NS_BR" tc qdisc replace dev "b-$c" root netem delay "${d}ms" "${j}ms" \
            loss "${loss}%"
}

# shape_links RTT_MS RTT_JITTER_MS ROUND_TRIP_LOSS_PERCENT CLIENT...: those clients' links,
# then the shaper (nfqueue).
shape_links() {
    local rtt=$1 jitter=$2 loss=$3 c
    shift 3
    for c in "$@"; do
        shape "$c" "$rtt" "$jitter" "$loss" || return 1
    done
    start_shaper
}

# Starts the user-space shaper with every client's link (nfqueue only; netem is set by shape).
start_shaper() {
    [ "$SHAPER" = nfqueue ] || return 0
    local c d j l queues=()
    for c in $CLIENTS; do
        read -r d j l <<<"${LINK[$c]:-0 0 0}"
        queues+=(--queue "${QUEUE_UP[$c]}:$d:$j:$l" --queue "${QUEUE_DOWN[$c]}:$d:$j:$l")
    done
    ip netns exec "$NS_BR" python3 "$ROOT/scripts/netem_shaper.py" "${queues[@]}" \
        --stats "$DIR/shaper.json" >"$DIR/shaper.log" 2>&1 &
    SHAPER_PID=$!
    local _i
    for _i in $(seq 50); do
        grep -q bound "$DIR/shaper.log" && return 0
        kill -0 "$SHAPER_PID" 2>/dev/null || break
        sleep 0.1
    done
    return 1
}

# Stops the shaper (SIGTERM: it lets its held packets go and writes its counters).
stop_shaper() {
    [ -n "$SHAPER_PID" ] || return 0
    kill "$SHAPER_PID" 2>/dev/null
    local _i
    for _i in $(seq 30); do
        kill -0 "$SHAPER_PID" 2>/dev/null || break
        sleep 0.1
    done
    kill -9 "$SHAPER_PID" 2>/dev/null
    wait "$SHAPER_PID" 2>/dev/null
    SHAPER_PID=""
}

# Packets the links dropped in this scenario, per client: "c1 up/down, c2 ..." (from the
# shaper's counters or netem's qdisc statistics).
link_drops() {
    local c out=""
    if [ "$SHAPER" = nfqueue ]; then
        [ -f "$DIR/shaper.json" ] || return 0
        python3 - "$DIR/shaper.json" <<'EOF'
import json, sys
stats = {q["queue"]: q for q in json.load(open(sys.argv[1]))["queues"]}
parts = []
for c, (up, down) in {"c1": (11, 21), "c2": (12, 22), "c3": (13, 23)}.items():
    u, d = stats[up], stats[down]
    if u["packets"] or d["packets"]:
        parts.append(f"{c} dropped {u['dropped']}/{u['packets']} up {d['dropped']}/{d['packets']} down")
print(", ".join(parts))
EOF
        return 0
    fi
    for c in $CLIENTS; do
        local up down
        up=$(ip netns exec "ssync-$c" tc -s qdisc show dev eth0 | grep -o 'Sent [0-9]* bytes [0-9]* pkt (dropped [0-9]*' | awk '{print $7"/"$4+$7}')
        down=$(ip netns exec "$NS_BR" tc -s qdisc show dev "b-$c" | grep -o 'Sent [0-9]* bytes [0-9]* pkt (dropped [0-9]*' | awk '{print $7"/"$4+$7}')
        [ -n "$up" ] && out+="${out:+, }$c dropped $up up $down down"
    done
    echo "$out"
}

# The links back to unshaped (netem qdiscs removed, the shaper's links zeroed).
unshape_all() {
    local c
    for c in $CLIENTS; do
        unset "LINK[$c]"
        if [ "$SHAPER" = netem ]; then
            ip netns exec "ssync-$c" tc qdisc del dev eth0 root 2>/dev/null
            ip netns exec "$NS_BR" tc qdisc del dev "b-$c" root 2>/dev/null
        fi
    done
}

# cut CLIENT on|off: every packet of the client's link dropped, both ways, or the link as shaped.
cut() {
    local c=$1 action
    if [ "$SHAPER" = netem ]; then
        if [ "$2" = on ]; then netem_set "$c" 100; else netem_set "$c" "$(awk '{print $3}' <<<"${LINK[$c]}")"; fi
        return
    fi
    if [ "$2" = on ]; then action=-I; else action=-D; fi
    ip netns exec "$NS_BR" "$IPT" "$action" FORWARD -m physdev --physdev-in "b-$c" -j DROP &&
        ip netns exec "$NS_BR" "$IPT" "$action" FORWARD -m physdev --physdev-out "b-$c" -j DROP
}

# Round trips of client 1 to the server over its shaped link: 100 UDP probes 10 ms apart to an
# echo in the server's namespace. Prints "median p5 p95 lost" (ms, ms, ms, of 100).
probe_rtt() {
    local echo_py='import socket
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind(("0.0.0.0", 9000)); s.settimeout(4)
try:
    while True:
        d, a = s.recvfrom(64); s.sendto(d, a)
except socket.timeout:
    pass'
    local probe_py='import socket, struct, sys, time
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.setblocking(False)
sent, rtts = {}, []
end = time.monotonic() + 2.5
i = 0
while time.monotonic() < end:
    now = time.monotonic()
    if i < 100 and now >= 0.2 + i * 0.01 + (end - 2.5):
        sent[i] = now; s.sendto(struct.pack(">I", i), (sys.argv[1], 9000)); i += 1
    try:
        d = s.recv(64); rtts.append((time.monotonic() - sent[struct.unpack(">I", d)[0]]) * 1000)
    except BlockingIOError:
        time.sleep(0.001)
rtts.sort()
pick = lambda f: rtts[min(len(rtts) - 1, int(f * len(rtts)))] if rtts else 0
print(f"{pick(0.5):.0f} {pick(0.05):.0f} {pick(0.95):.0f} {100 - len(rtts)}")'
    ip netns exec "$NS_SRV" python3 -c "$echo_py" >/dev/null 2>&1 &
    local echo_pid=$!
    sleep 0.3
    ip netns exec ssync-c1 python3 -c "$probe_py" "$SERVER_IP"
    kill "$echo_pid" 2>/dev/null
    wait "$echo_pid" 2>/dev/null
}

# ---------------------------------------------------------------------------------------------
# The server and its admin API
# ---------------------------------------------------------------------------------------------

admin() {
    ip netns exec "$NS_SRV" curl -sS -m 5 -H "Authorization: Bearer $(cat "$DIR/admin.token")" "$@"
}

# start_server [EXTRA FLAGS]: a new key and admin token, the server in ssync-srv, ready.
start_server() {
    "$SERVER" keygen >"$DIR/server.key" || return 1
    head -c 24 /dev/urandom | base64 | tr -d '/+=' >"$DIR/admin.token"
    start server "$NS_SRV" "$SERVER" serve --private-key-file "$DIR/server.key" \
        --admin-token-file "$DIR/admin.token" --bind "0.0.0.0:$GAME_PORT" \
        --public-addr "$SERVER_IP:$GAME_PORT" --ops-bind "${OPS#http://}" \
        --empty-room-timeout 60 "$@"
    local _i
    for _i in $(seq 100); do
        ip netns exec "$NS_SRV" curl -sf -m 1 "$OPS/readyz" >/dev/null 2>&1 && return 0
        kill -0 "${PID[server]}" 2>/dev/null || return 1
        sleep 0.1
    done
    return 1
}

# create_room SANDBOX-ROOM-CONFIG-ARGS...: POST /rooms with the sandbox's room config.
create_room() {
    "$SANDBOX" room-config "$@" >"$DIR/room.json" 2>>"$DIR/admin.log" ||
        { echo "sandbox room-config $* failed" >>"$DIR/admin.log"; return 1; }
    local code
    code=$(admin -o "$DIR/room-created.json" -w '%{http_code}' -X POST "$OPS/rooms" \
        -H 'Content-Type: application/json' --data-binary @"$DIR/room.json")
    [ "$code" = 201 ] || { echo "POST /rooms: $code $(cat "$DIR/room-created.json")" >>"$DIR/admin.log"; return 1; }
}

# token ROOM SLOT CLIENT_ID FILE
token() {
    "$SERVER" token --private-key-file "$DIR/server.key" --server "$SERVER_IP:$GAME_PORT" \
        --room "$1" --slot "$2" --client-id "$3" --out "$4" >>"$DIR/admin.log" 2>&1
}

# metric NAME [LABELS]: a value of the server's /metrics (saved in $DIR/metrics.txt).
metric() {
    awk -v name="$1" -v labels="${2:-}" '
        $1 == name || $1 == name "{" labels "}" { print $2; found = 1; exit }
        END { if (!found) print 0 }' "$DIR/metrics.txt"
}

save_metrics() {
    ip netns exec "$NS_SRV" curl -sS -m 5 "$OPS/metrics" >"$DIR/metrics.txt" 2>/dev/null
}

server_numbers() {
    save_metrics
    echo "server bytes in/out $(metric simsync_bytes_total 'direction="in"')/$(metric simsync_bytes_total 'direction="out"'), resent sets $(metric simsync_resent_sets_total), desyncs $(metric simsync_desyncs_total)"
}

# Fails (with DETAIL) when the relay judged a desync: simsync_desyncs_total of the saved metrics.
no_server_desync() {
    local desyncs
    desyncs=$(metric simsync_desyncs_total)
    [ "$desyncs" = 0 ] || { DETAIL="the server judged $desyncs desyncs; $DETAIL"; return 1; }
}

# stop_server: SIGTERM, then the drain; RC[server] is its exit status.
stop_server() {
    kill -TERM "${PID[server]}" 2>/dev/null
    await server 20
}

# ---------------------------------------------------------------------------------------------
# Checks on the clients' summaries
# ---------------------------------------------------------------------------------------------

# relay_agree SUMMARY...: every summary has no desync and the same final checksum at the same
# verified tick count target. Prints the numbers (or why not) and fails on disagreement.
relay_agree() {
    python3 - "$@" <<'EOF'
import json, sys
runs = [json.load(open(p)) for p in sys.argv[1:]]
finals = {r["final_checksum"] for r in runs}
bad = [f"{p}: desyncs {r['desyncs']}, others desynced {r['others_desynced']}, "
       f"mismatches {r['checksum_mismatches']}, "
       f"resim {r['resim_ticks_matching']}/{r['resim_ticks_checked']}"
       for p, r in zip(sys.argv[1:], runs)
       if r["desyncs"] or r["others_desynced"] or r["checksum_mismatches"]
       or r["resim_ticks_matching"] != r["resim_ticks_checked"]]
numbers = "; ".join(
    f"slot {r['slot']}: final {r['final_checksum']} at tick {r['ticks']}, verified "
    f"{r['ticks_verified']} from {r['first_verified_tick']}, rtt {r['rtt_ms']} ms, delay "
    f"{r['input_delay_ticks']} ticks, rollbacks {r['rollbacks']}, resimulated "
    f"{r['resimulated_ticks']}, replaced inputs {r['replaced_inputs']}, snapshots loaded "
    f"{r['snapshots_loaded']}" for r in runs)
if len(finals) != 1 or len({r["ticks"] for r in runs}) != 1:
    print(f"final checksums differ: {numbers}")
    sys.exit(1)
if bad:
    print("desync: " + "; ".join(bad))
    sys.exit(1)
print(numbers)
EOF
}

# ---------------------------------------------------------------------------------------------
# Scenarios. Each sets DETAIL (the numbers, or why it failed) and returns 0 (pass) or 1.
# ---------------------------------------------------------------------------------------------

# start_relay_match TICKS: a 2-player relay room (id 1) and two joins: c1 in slot 0, c2 in 1.
start_relay_match() {
    local ticks=$1
    create_room --players 2 --id 1 || { DETAIL="room not created: $(tail -1 "$DIR/admin.log")"; return 1; }
    if ! { token 1 0 1001 "$DIR/c1.token" && token 1 1 1002 "$DIR/c2.token"; }; then
        DETAIL="tokens not minted"
        return 1
    fi
    local c
    for c in c1 c2; do
        start "$c" "ssync-$c" "$SANDBOX" join --token "$DIR/$c.token" --players 2 \
            --ticks "$ticks" --summary-json "$DIR/$c.json"
    done
}

# wait_verified CLIENT TICK SECONDS: until the client's progress line shows verified >= TICK.
wait_verified() {
    local end=$((SECONDS + $3)) v
    while [ "$SECONDS" -lt "$end" ]; do
        v=$(grep -o 'verified [0-9]*' "$DIR/$1.log" 2>/dev/null | tail -1 | awk '{print $2}')
        [ -n "$v" ] && [ "$v" -ge "$2" ] && return 0
        kill -0 "${PID[$1]}" 2>/dev/null || return 1
        sleep 0.2
    done
    return 1
}

# Both clients of a relay match exit 0 within SECONDS and agree.
finish_relay_match() {
    local secs=$1 c ok=0
    for c in c1 c2; do
        await "$c" "$secs" || ok=1
    done
    if [ "$ok" != 0 ]; then
        DETAIL="client exit codes: c1 ${RC[c1]}, c2 ${RC[c2]}: $(grep -h '^client: \|rror' "$DIR"/c1.log "$DIR"/c2.log | tail -2 | tr '\n' ' ')"
        return 1
    fi
    DETAIL=$(relay_agree "$DIR/c1.json" "$DIR/c2.json") || return 1
}

relay_under() { # RTT JITTER LOSS TICKS
    shape_links "$1" "$2" "$3" c1 c2 || { DETAIL="links not shaped"; return 1; }
    local rtt
    rtt=$(probe_rtt)
    start_server --drain-timeout 2 || { DETAIL="server not ready"; return 1; }
    start_relay_match "$4" || return 1
    finish_relay_match $(($4 / 64 + 60)) || return 1
    local numbers
    numbers=$(server_numbers)
    stop_server
    stop_shaper
    DETAIL="probe rtt median/p5/p95 ${rtt% *} ms lost ${rtt##* }/100; $DETAIL; $numbers; $(link_drops)"
    [ "${RC[server]}" = 0 ] || { DETAIL="server exit ${RC[server]}; $DETAIL"; return 1; }
    no_server_desync || return 1
}

scenario_150ms_5pct() { relay_under 150 20 5 600; }
scenario_300ms_10pct() { relay_under 300 20 10 600; }

scenario_cut_3s() {
    shape_links 150 20 5 c1 c2 || { DETAIL="links not shaped"; return 1; }
    start_server --drain-timeout 2 || { DETAIL="server not ready"; return 1; }
    start_relay_match 900 || return 1
    wait_verified c2 128 30 || { DETAIL="client 2 never verified tick 128"; return 1; }
    cut c2 on || { DETAIL="link not cut"; return 1; }
    local cut_at=$SECONDS
    sleep 3
    cut c2 off || { DETAIL="link not restored"; return 1; }
    echo "cut c2 for 3 s at $cut_at" >>"$DIR/admin.log"
    finish_relay_match 60 || return 1
    local numbers
    numbers=$(server_numbers)
    stop_server
    stop_shaper
    DETAIL="$DETAIL; $numbers; $(link_drops)"
    [ "${RC[server]}" = 0 ] || { DETAIL="server exit ${RC[server]}; $DETAIL"; return 1; }
    no_server_desync || return 1
}

scenario_kill_9_rejoin() {
    shape_links 150 20 5 c1 c2 || { DETAIL="links not shaped"; return 1; }
    start_server --drain-timeout 2 || { DETAIL="server not ready"; return 1; }
    # Client 2 is killed after 11 s of the match, when the relay's 10 s of input history no
    # longer reaches tick 1: the restarted client needs a snapshot. The match lasts long
    # enough that the killed connection times out on the server (netcode's 15 s) while it runs.
    local ticks=2100
    start_relay_match "$ticks" || return 1
    wait_verified c2 704 40 || { DETAIL="client 2 never verified tick 704"; return 1; }
    kill -9 "${PID[c2]}"
    wait "${PID[c2]}" 2>/dev/null
    RC[c2]=killed
    local killed_at=$SECONDS
    mv "$DIR/c2.log" "$DIR/c2-killed.log"
    # The relay counts a silent player gone after 2 s; before that the slot is still connected.
    sleep 3
    token 1 1 1003 "$DIR/c2b.token" || { DETAIL="token not minted"; return 1; }
    start c2b ssync-c2 "$SANDBOX" join --token "$DIR/c2b.token" --players 2 --ticks "$ticks" \
        --summary-json "$DIR/c2b.json"
    # Once the killed connection has timed out: the room holds client 1 and the new client.
    while [ $((SECONDS - killed_at)) -lt 17 ] && kill -0 "${PID[c1]}" 2>/dev/null; do sleep 0.2; done
    admin "$OPS/rooms/1" >"$DIR/room-after-timeout.json" 2>>"$DIR/admin.log"
    local ok=0
    await c1 $((ticks / 64 + 60)) || ok=1
    await c2b 60 || ok=1
    if [ "$ok" != 0 ]; then
        DETAIL="client exit codes: c1 ${RC[c1]}, restarted c2 ${RC[c2b]}: $(grep -h '^client: \|rror' "$DIR"/c1.log "$DIR"/c2b.log | tail -2 | tr '\n' ' ')"
        return 1
    fi
    DETAIL=$(relay_agree "$DIR/c1.json" "$DIR/c2b.json") || return 1
    local numbers rejoins clients
    numbers=$(server_numbers)
    rejoins=$(metric simsync_rejoins_total)
    clients=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["clients"])' \
        "$DIR/room-after-timeout.json" 2>/dev/null)
    stop_server
    stop_shaper
    DETAIL="killed at verified tick $(grep -o 'verified [0-9]*' "$DIR/c2-killed.log" | tail -1 | awk '{print $2}'), restarted 3 s later; rejoins $rejoins, snapshot bytes $(metric simsync_snapshot_bytes_total), room clients 17 s after the kill ${clients:-?}; $DETAIL; $numbers; $(link_drops)"
    [ "${RC[server]}" = 0 ] || { DETAIL="server exit ${RC[server]}; $DETAIL"; return 1; }
    no_server_desync || return 1
    [ "$rejoins" -ge 1 ] || { DETAIL="the server counted no rejoin; $DETAIL"; return 1; }
    # netcode drops a connection silent for 15 s: by now only client 1 and the new client.
    [ "${clients:-}" = 2 ] || { DETAIL="the room held ${clients:-?} connections 17 s after the kill, not 2; $DETAIL"; return 1; }
}

scenario_sigterm_drain() {
    shape_links 150 20 5 c1 c2 || { DETAIL="links not shaped"; return 1; }
    start_server --drain-timeout 2 || { DETAIL="server not ready"; return 1; }
    start_relay_match 6400 || return 1
    if ! { wait_verified c1 128 30 && wait_verified c2 128 30; }; then
        DETAIL="the match did not run"
        return 1
    fi
    local t0=$SECONDS
    kill -TERM "${PID[server]}"
    local c bad=""
    for c in c1 c2; do
        await "$c" 12
        if [ "${RC[$c]}" != 1 ]; then
            bad+="$c exit ${RC[$c]} (want 1); "
        elif ! grep -q 'server shut down' "$DIR/$c.log"; then
            bad+="$c did not say 'server shut down'; "
        fi
    done
    await server 10
    local took=$((SECONDS - t0))
    [ "${RC[server]}" = 0 ] || bad+="server exit ${RC[server]} (want 0); "
    stop_shaper
    local why
    why=$(grep -h 'server shut down' "$DIR/c1.log" | tail -1)
    if [ -n "$bad" ]; then
        DETAIL="$bad$why"
        return 1
    fi
    DETAIL="both clients exit 1 and the server 0 within ${took} s of SIGTERM (drain timeout 2 s): $why"
}

scenario_ownership_3() {
    local c i
    # shellcheck disable=SC2086
    shape_links 150 20 5 $CLIENTS || { DETAIL="links not shaped"; return 1; }
    start_server --drain-timeout 2 || { DETAIL="server not ready"; return 1; }
    create_room --ownership --participants 3 --id 2 ||
        { DETAIL="room not created: $(tail -1 "$DIR/admin.log")"; return 1; }
    i=0
    for c in $CLIENTS; do
        token 2 "$i" $((2001 + i)) "$DIR/$c.token" || { DETAIL="token not minted"; return 1; }
        start "$c" "ssync-$c" "$SANDBOX" join --ownership --token "$DIR/$c.token" \
            --participants 3 --participant-index "$i" --ticks 1800 --settle-seconds 4 \
            --summary-json "$DIR/$c.json"
        i=$((i + 1))
    done
    local ok=0
    for c in $CLIENTS; do await "$c" 120 || ok=1; done
    if [ "$ok" != 0 ]; then
        DETAIL="participant exit codes: c1 ${RC[c1]}, c2 ${RC[c2]}, c3 ${RC[c3]}"
        return 1
    fi
    DETAIL=$(python3 - "$DIR"/c1.json "$DIR"/c2.json "$DIR"/c3.json <<'EOF'
import itertools, json, math, sys
runs = [json.load(open(p)) for p in sys.argv[1:]]
ids = [set(r["bodies"]) for r in runs]
if not ids[0] or any(i != ids[0] for i in ids):
    print(f"the participants hold different bodies: {[sorted(i) for i in ids]}")
    sys.exit(1)
worst, where = 0.0, None
for body in ids[0]:
    for a, b in itertools.combinations(range(len(runs)), 2):
        d = math.dist(runs[a]["bodies"][body], runs[b]["bodies"][body])
        if d > worst:
            worst, where = d, (body, a, b)
sent = sum(r["state_updates_sent"] for r in runs)
applied = sum(r["relays_applied"] for r in runs)
resends = sum(r["bid_resends"] for r in runs)
numbers = (f"{len(ids[0])} dynamic bodies, largest difference {worst * 100:.3f} cm"
           + (f" (body {where[0]}, participants {where[1]} and {where[2]})" if where else "")
           + f"; {sent} state updates sent, {applied} relayed states applied, {resends} bid resends")
print(numbers)
sys.exit(0 if worst <= 0.01 else 1)
EOF
    ) || return 1
    local numbers
    numbers=$(server_numbers)
    stop_server
    stop_shaper
    DETAIL="$DETAIL; ${numbers%, resent*}; $(link_drops)"
    [ "${RC[server]}" = 0 ] || { DETAIL="server exit ${RC[server]}; $DETAIL"; return 1; }
    no_server_desync || return 1
}

# ---------------------------------------------------------------------------------------------
# Main
# ---------------------------------------------------------------------------------------------

remove_namespaces
setup_network || { say "FAIL: the network could not be set up"; exit 1; }
say "namespaces $NS_SRV ($SERVER_IP), ssync-c1..c3 (${CLIENT_IP[c1]}..${CLIENT_IP[c3]}), bridge $BRIDGE in $NS_BR; logs in $LOGS"

passed=0
failed=0
failed_names=""
total_start=$SECONDS
for name in $SCENARIOS; do
    if [ -n "$only" ] && [[ " $only " != *" $name "* ]]; then
        continue
    fi
    DIR=$LOGS/$name
    mkdir -p "$DIR"
    PID=()
    RC=()
    DETAIL=""
    started=$SECONDS
    "scenario_${name//-/_}"
    status=$?
    stop_all
    unshape_all
    took=$((SECONDS - started))
    if [ "$status" = 0 ]; then
        say "$name: PASS (${took} s; $DETAIL)"
        passed=$((passed + 1))
    else
        say "$name: FAIL ($DETAIL; ${took} s)"
        failed=$((failed + 1))
        failed_names+=" $name"
        for log in "$DIR"/*.log; do
            [ -s "$log" ] || continue
            echo "----- $name: $(basename "$log") (last 40 lines) -----" >&2
            tail -n 40 "$log" >&2
        done
    fi
done

say "summary: $passed passed, $failed failed${failed_names:+ (}${failed_names# }${failed_names:+)}; shaper $SHAPER; $((SECONDS - total_start)) s; logs in $LOGS"
if [ "$failed" = 0 ] && [ "$keep_logs" = 0 ]; then
    rm -rf "${LOGS:?}"
fi
[ "$failed" = 0 ]
