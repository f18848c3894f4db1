#!/usr/bin/env bash
# One liar in an authoritative room, with the shipped binary over real UDP sockets on
# 127.0.0.1: `sandbox host --authoritative --players 3` and three `sandbox join --token`
# clients, the one in slot 0 planting a desync (`--plant-desync 120`: its simulation nudges
# player 0's body). Checks the desync accounting (one desync in the room, in the server's
# `simsync_desyncs_total` and in the liar's summary, judged by the authority; each honest client
# told "player 0 desynced" and counting no desync of its own; all three exit 0 with the same
# final checksum) and the desync dumps (every client dumps ticks 119 and 120; `sandbox diff` of
# the liar's and an honest client's dumps: 119 equal, 120 differing first in player 0's body
# (the nudge, the largest change; at most 5 differences). docs/netem.md ("One liar over UDP")
# describes it and its numbers.
#
# usage: scripts/authority_liar.sh [--runs N] [--keep-logs]
#   --runs       play the scenario N times (default 1); every run must pass
#   --keep-logs  keep the log directory even when every run passed
# SANDBOX_BIN names a prebuilt sandbox; otherwise the release build is made (`cargo build
# --ignore-rust-version --release --example sandbox` under $CARGO_TARGET_DIR or target/, with
# the caller's RUSTFLAGS: .ci/run gives the same as for its netem and determinism steps, so the
# build is already there). Needs python3. Needs no root: nothing but loopback sockets.
# Exit 0: every run passed; 1: a check failed (the logs' last lines are printed), the build
# failed or an argument is wrong.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
ROOT=$PWD

PLAYERS=3
# Long enough that a liar far behind (its captures slow it down until its dumps are written)
# is resynced to a tick before the end and plays to the end with the others.
TICKS=640
PLANT=120
runs=1
keep_logs=0
while [ $# -gt 0 ]; do
    case "$1" in
        --runs) runs="$2"; shift ;;
        --keep-logs) keep_logs=1 ;;
        *) sed -n '12,20p' "$0" >&2; exit 1 ;;
    esac
    shift
done
[[ "$runs" =~ ^[1-9][0-9]*$ ]] || { echo "liar: --runs takes a positive number" >&2; exit 1; }

say() { echo "liar: $*"; }
command -v python3 >/dev/null || { say "FAIL: no python3"; exit 1; }

target=${CARGO_TARGET_DIR:-$ROOT/target}
case "$target" in /*) ;; *) target=$ROOT/$target ;; esac
if [ -z "${SANDBOX_BIN:-}" ]; then
    cargo build --ignore-rust-version --release --example sandbox ||
        { say "FAIL: cargo build --example sandbox"; exit 1; }
    SANDBOX_BIN=$target/release/examples/sandbox
fi
[ -x "$SANDBOX_BIN" ] || { say "FAIL: no sandbox binary at $SANDBOX_BIN"; exit 1; }

LOGS=$(mktemp -d /tmp/simsync-liar.XXXXXX)
# A copy, so that a build during the run cannot swap the binary under it.
cp "$SANDBOX_BIN" "$LOGS/sandbox" || { say "FAIL: cannot copy $SANDBOX_BIN"; exit 1; }
SANDBOX=$LOGS/sandbox
export NO_COLOR=1

# The poller of a run: python3 poll.py HOST_PID OPS_URL DIR reads /metrics and /rooms/1 into
# DIR every 0.2 s (each file replaced whole) until the host process is gone.
cat >"$LOGS/poll.py" <<'EOF'
import os, sys, time, urllib.request
pid, http, d = int(sys.argv[1]), sys.argv[2], sys.argv[3]
token = open(os.path.join(d, "tokens", "admin.token")).read().strip()
def get(path, out, auth=False):
    req = urllib.request.Request(http + path)
    if auth:
        req.add_header("Authorization", "Bearer " + token)
    try:
        with urllib.request.urlopen(req, timeout=1) as r:
            body = r.read()
    except Exception:
        return
    open(out + ".new", "wb").write(body)
    os.replace(out + ".new", out)
while True:
    try:
        os.kill(pid, 0)
    except OSError:
        break
    get("/metrics", os.path.join(d, "metrics.txt"))
    get("/rooms/1", os.path.join(d, "room.json"), auth=True)
    time.sleep(0.2)
EOF

declare -A PID=() RC=()

# start NAME COMMAND...: runs COMMAND from the repository root in the background, stdout to
# $DIR/NAME.out, stderr (the log lines) to $DIR/NAME.log.
start() {
    local name=$1
    shift
    (cd "$ROOT" && exec "$@") >"$DIR/$name.out" 2>"$DIR/$name.log" &
    PID[$name]=$!
    RC[$name]=running
}

# await NAME SECONDS: waits for NAME to exit, at most SECONDS (then kills it: RC "timeout").
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

# Kills this script's processes still running (by their ids).
stop_all() {
    local name
    for name in "${!PID[@]}"; do
        if [ "${RC[$name]}" = running ] && kill -0 "${PID[$name]}" 2>/dev/null; then
            kill -9 "${PID[$name]}" 2>/dev/null
            wait "${PID[$name]}" 2>/dev/null
            RC[$name]=killed
        fi
    done
}
trap 'stop_all 2>/dev/null; rm -f "${LOGS:?}/sandbox"' EXIT
trap 'exit 130' INT TERM

# Two free loopback ports: "UDP TCP".
free_ports() {
    python3 -c 'import socket
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); u.bind(("127.0.0.1", 0))
t = socket.socket(); t.bind(("127.0.0.1", 0))
print(u.getsockname()[1], t.getsockname()[1])'
}

# http_get URL OUT [TOKEN]: GET into OUT; fails unless 200.
http_get() {
    python3 - "$@" <<'EOF'
import sys, urllib.request
url, out = sys.argv[1], sys.argv[2]
req = urllib.request.Request(url)
if len(sys.argv) > 3:
    req.add_header("Authorization", "Bearer " + open(sys.argv[3]).read().strip())
try:
    with urllib.request.urlopen(req, timeout=2) as r:
        body = r.read()
except Exception as e:
    print(e, file=sys.stderr)
    sys.exit(1)
open(out, "wb").write(body)
EOF
}

# One run: sets DETAIL (the numbers, or why it failed) and returns 0 (pass) or 1.
liar_run() {
    local udp ops c slot
    read -r udp ops < <(free_ports)
    local http=http://127.0.0.1:$ops
    start host "$SANDBOX" host --authoritative --players "$PLAYERS" --bind "127.0.0.1:$udp" \
        --ops "127.0.0.1:$ops" --tokens "$DIR/tokens"
    local _i ready=0
    for _i in $(seq 100); do
        http_get "$http/readyz" "$DIR/readyz" 2>/dev/null && { ready=1; break; }
        kill -0 "${PID[host]}" 2>/dev/null || break
        sleep 0.1
    done
    [ "$ready" = 1 ] || { DETAIL="the host never answered /readyz"; return 1; }
    # Slot 0 lies; slots 0 and 1 keep dumps (a capture of the verified world every tick until
    # the desync is dumped, ~20 ms and ~3 MB each for this scene: their prediction check, which
    # would capture every predicted tick too, is off); slot 2 runs the prediction check.
    local flags=(
        "--plant-desync $PLANT --dump-dir $DIR/dumps-c0 --no-verify-predictions"
        "--dump-dir $DIR/dumps-c1 --no-verify-predictions"
        ""
    )
    for slot in $(seq 0 $((PLAYERS - 1))); do
        # shellcheck disable=SC2086
        start "c$slot" "$SANDBOX" join --token "$DIR/tokens/slot$slot.token" \
            --players "$PLAYERS" --ticks "$TICKS" ${flags[$slot]} --summary-json "$DIR/c$slot.json"
    done
    # The room's numbers and the metrics, read every 0.2 s until the host exits (it ends once
    # every client has left after the match): the last read is of the finished match.
    start poll python3 "$LOGS/poll.py" "${PID[host]}" "$http" "$DIR"
    local bad=""
    for slot in $(seq 0 $((PLAYERS - 1))); do
        await "c$slot" $((TICKS / 64 + 40)) || bad+="c$slot exit ${RC[c$slot]}; "
    done
    # The room ends once its players have left after the match; then the host exits.
    if ! await host 10; then
        [ "${RC[host]}" = timeout ] && bad+="the host did not exit within 10 s of the clients; "
        [ "${RC[host]}" != timeout ] && bad+="host exit ${RC[host]}; "
    fi
    await poll 5
    for slot in 0 1; do
        "$SANDBOX" diff "$DIR/dumps-c0/desync-t$((PLANT - 1 + slot))-verified-p0.simdump" \
            "$DIR/dumps-c1/desync-t$((PLANT - 1 + slot))-verified-p1.simdump" \
            >"$DIR/diff-t$((PLANT - 1 + slot)).txt" 2>&1
        echo "exit $?" >>"$DIR/diff-t$((PLANT - 1 + slot)).txt"
    done
    DETAIL=$(python3 - "$DIR" "$PLAYERS" "$PLANT" <<'EOF'
import json, os, re, sys
d, players, plant = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
bad, notes = [], []
def check(ok, why):
    if not ok:
        bad.append(why)
    return ok
def text(name):
    p = os.path.join(d, name)
    return open(p).read() if os.path.exists(p) else ""

# The server: one desync, in the room and in the metric; the authority resynced the liar.
metrics = {}
for line in text("metrics.txt").splitlines():
    if line and not line.startswith("#"):
        name, _, value = line.rpartition(" ")
        metrics[name] = value
desyncs_total = metrics.get("simsync_desyncs_total")
check(desyncs_total == "1", f"simsync_desyncs_total {desyncs_total} (want 1)")
room = json.loads(text("room.json") or "{}").get("relay") or {}
check(room.get("desyncs") == 1, f"room desyncs {room.get('desyncs')} (want 1)")
authority = room.get("authority") or {}
check(authority.get("resyncs") == 1, f"authority resyncs {authority.get('resyncs')} (want 1)")
host_out = text("host.out")
final = json.loads(host_out[host_out.index("room 1: ") + 8:]) if "room 1: " in host_out else None
end_reason = (final or {}).get("end_reason")
if check(final is not None, "the host printed no final room"):
    check((final.get("relay") or {}).get("desyncs") == 1,
          f"the host's final room desyncs {(final.get('relay') or {}).get('desyncs')} (want 1)")

# The clients: the liar told the authority judged it, the others told "player 0 desynced".
runs = [json.load(open(os.path.join(d, f"c{s}.json"))) for s in range(players)]
want_liar = [{"tick": plant, "players": [0], "judge": "authority", "own": True}]
want_honest = [{"tick": plant, "players": [0], "judge": "authority", "own": False}]
liar = runs[0]
check(liar["slot"] == 0, f"the liar played slot {liar['slot']}")
check(liar["desyncs"] == 1 and liar["resyncs"] == 1,
      f"liar: desyncs {liar['desyncs']}, resyncs {liar['resyncs']} (want 1 and 1)")
check(liar["desyncs_told"] == want_liar, f"liar told {liar['desyncs_told']} (want {want_liar})")
liar_log = text("c0.log")
check("differs from the authority's verified world" in liar_log,
      "the liar's log does not say the authority judged it")
check("majority" not in liar_log, "the liar's log speaks of a majority")
for s, r in enumerate(runs[1:], 1):
    check(r["desyncs"] == 0 and r["others_desynced"] == 1 and r["checksum_mismatches"] == 0,
          f"c{s}: desyncs {r['desyncs']}, others desynced {r['others_desynced']}, "
          f"mismatches {r['checksum_mismatches']} (want 0, 1, 0)")
    check(r["desyncs_told"] == want_honest, f"c{s} told {r['desyncs_told']} (want {want_honest})")
    out = text(f"c{s}.out")
    check(f"player 0 desynced at tick {plant}, judged by the authority; this client agrees" in out,
          f"c{s} did not print that player 0 desynced")
    errors = [l for l in text(f"c{s}.log").splitlines() if " ERROR " in l]
    check(not errors, f"c{s} logged {len(errors)} ERROR line(s): {errors[:1]}")
    check(r["resim_ticks_matching"] == r["resim_ticks_checked"],
          f"c{s}: resim {r['resim_ticks_matching']}/{r['resim_ticks_checked']}")
finals = {(r["final_tick"], r["final_checksum"]) for r in runs}
check(len(finals) == 1,
      f"final ticks and checksums differ: {[(r['final_tick'], r['final_checksum']) for r in runs]}")
check(len({r["ticks_verified"] for r in runs[1:]}) == 1, "the honest clients verified different tick counts")

# The dumps: ticks plant-1 and plant on every client; the liar's and an honest one's diff.
for s in (0, 1):
    dumps = sorted(os.listdir(os.path.join(d, f"dumps-c{s}"))) if os.path.isdir(os.path.join(d, f"dumps-c{s}")) else []
    want = [f"desync-t{plant - 1}-verified-p{s}.simdump", f"desync-t{plant}-verified-p{s}.simdump"]
    check(dumps == want, f"c{s} dumps {dumps} (want {want})")
before, at = text(f"diff-t{plant - 1}.txt"), text(f"diff-t{plant}.txt")
check(before.rstrip().endswith("exit 0") and "no difference" in before,
      f"diff of tick {plant - 1}: {before.strip().splitlines()[-2:]}")
m = re.search(r"(\d+) difference\(s\) between tick (\d+) \(a\) and tick (\d+) \(b\)", at)
first = re.search(r"entity slot (\d+) generation \d+, component (\S+)", at)
body = re.search(r"\(slot (\d+), the first difference, is player (\d+)'s body\)", at)
root = re.search(r"the kept hashes first differ at tick (\d+)", at)
# The first difference's fields, and the one that changed most.
fields = re.findall(r"^    (\S+): a = (\S+)  b = (\S+)$", at.split("  inputs of the tick")[0], re.M)
def gap(f):
    try:
        return abs(float(f[1]) - float(f[2]))
    except ValueError:
        return float("inf")
field = max(fields, key=gap) if fields else None
differences = int(m.group(1)) if m else None
if check(m is not None and at.rstrip().endswith("exit 1"), f"diff of tick {plant}: {at.strip()[:300]}"):
    check((m.group(2), m.group(3)) == (str(plant), str(plant)), f"diff of ticks {m.group(2)}/{m.group(3)}")
    # The nudge (0.5 m/s, after the tick's physics step) is the largest change, and the world
    # at the planted tick differs in player 0's body alone: at most a handful of differences.
    check(field is not None and gap(field) >= 0.1,
          f"the first difference is not the nudge: {field if field else at[:300]}")
    check(differences is not None and differences <= 5,
          f"{differences} differences at the planted tick (want at most 5: player 0's body)")
    check(body is not None and body.group(2) == "0" and first is not None
          and body.group(1) == first.group(1),
          f"the first difference is not player 0's body: {first.group(0) if first else at[:200]}")
    check(root is not None and root.group(1) == str(plant),
          f"the root tick is {root.group(1) if root else None} (want {plant})")

print("; ".join(bad) if bad else
      f"desyncs: room {room.get('desyncs')}, simsync_desyncs_total {desyncs_total}, "
      f"authority resyncs {authority.get('resyncs')}, end {end_reason}; liar resynced "
      f"{liar['resynced']}, told {want_liar[0]['judge']}; honest: desyncs "
      f"{[r['desyncs'] for r in runs[1:]]}, others desynced {[r['others_desynced'] for r in runs[1:]]}; "
      f"final {runs[0]['final_checksum']} on all {players} at tick {runs[0]['final_tick']}; replaced "
      f"inputs {[r['replaced_inputs'] for r in runs]}; dumps t{plant - 1}/t{plant}: diff at "
      f"t{plant} {differences} difference(s), first {first.group(2).rsplit('::', 1)[-1] if first else '?'} "
      f"of slot {first.group(1) if first else '?'} (player 0's body)"
      + (f", its largest change {field[0]} {field[1]} vs {field[2]}" if field else ""))
sys.exit(1 if bad else 0)
EOF
    ) || { DETAIL="$bad$DETAIL"; return 1; }
    [ -z "$bad" ] || { DETAIL="$bad$DETAIL"; return 1; }
}

passed=0
failed=0
total_start=$SECONDS
for run in $(seq 1 "$runs"); do
    DIR=$LOGS/run$run
    mkdir -p "$DIR"
    PID=()
    RC=()
    DETAIL=""
    started=$SECONDS
    liar_run
    status=$?
    stop_all
    took=$((SECONDS - started))
    if [ "$status" = 0 ]; then
        say "run $run: PASS (${took} s; $DETAIL)"
        passed=$((passed + 1))
    else
        say "run $run: FAIL ($DETAIL; ${took} s)"
        failed=$((failed + 1))
        for log in "$DIR"/*.out "$DIR"/*.log "$DIR"/diff-*.txt; do
            [ -s "$log" ] || continue
            echo "----- run $run: $(basename "$log") (last 25 lines) -----" >&2
            tail -n 25 "$log" >&2
        done
    fi
done
say "summary: $passed passed, $failed failed; $((SECONDS - total_start)) s; logs in $LOGS"
if [ "$failed" = 0 ] && [ "$keep_logs" = 0 ]; then
    rm -rf "${LOGS:?}"
fi
[ "$failed" = 0 ]
