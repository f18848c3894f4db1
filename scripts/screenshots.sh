#!/usr/bin/env bash
# Proof by picture: runs the rendered sandbox (`sandbox_view`, `render` feature) in local,
# network, ownership and hybrid mode under Xvfb with Mesa's software Vulkan driver (lavapipe), saves a
# screenshot of each through Bevy's screenshot API and checks it with scripts/check_screenshot.py
# (not blank, HUD present; in ownership mode the owner colours present). Then runs the headless
# sandbox on the same run and prints both summaries, so the view's numbers can be compared.
# Last, a match over UDP on 127.0.0.1: `sandbox host` and two rendered `sandbox_view join`
# windows, player 1 scripted by assets/traces/push_pile.ron (it pushes the crate stack over),
# player 0 idle; player 0's window is shot at the match's start and end and the stack's part of
# the picture must have changed; both clients must end on the same final checksum.
#
# usage: scripts/screenshots.sh [--no-install] [--release] [--out DIR] [--ticks N]
#                               [--ownership-ticks N] [--join-ticks N]
#   --no-install  never call apt-get (fail with exit 2 when something is missing)
#   --release     build and run the release profile (faster frames, longer build)
#   --out DIR     where the PNGs go (default docs/screenshots)
#   --ticks N     verified ticks of the local and network runs (default 300)
#   --ownership-ticks N  scripted ticks of the ownership run (default 480)
#   --join-ticks N  verified ticks of the UDP match (default 512; the push ends at tick 472)
# Installs xvfb, mesa-vulkan-drivers, libvulkan1 and the X11 runtime libraries from Debian's
# packages with apt-get (as root or through sudo) when Xvfb or the lavapipe driver is missing.
# Exit 0 ok, 1 a run or check failed, 2 the environment could not be set up (no apt, no X
# server, no Vulkan driver): what was tried is printed.
set -uo pipefail
cd "$(dirname "$0")/.."

install=1
profile=debug
cargo_profile=()
out=docs/screenshots
ticks=300
ownership_ticks=480
join_ticks=512
while [ $# -gt 0 ]; do
    case "$1" in
        --no-install) install=0 ;;
        --release) profile=release; cargo_profile=(--release) ;;
        --out) out="$2"; shift ;;
        --ticks) ticks="$2"; shift ;;
        --ownership-ticks) ownership_ticks="$2"; shift ;;
        --join-ticks) join_ticks="$2"; shift ;;
        *) echo "usage: $0 [--no-install] [--release] [--out DIR] [--ticks N] [--ownership-ticks N] [--join-ticks N]" >&2; exit 2 ;;
    esac
    shift
done

lavapipe() { ls /usr/share/vulkan/icd.d/lvp_icd.*.json 2>/dev/null | head -1; }
packages="xvfb xauth mesa-vulkan-drivers libvulkan1 libx11-6 libx11-xcb1 libxcursor1 libxi6 libxrandr2 libxkbcommon-x11-0"
if ! command -v Xvfb >/dev/null || [ -z "$(lavapipe)" ]; then
    if [ "$install" = 0 ]; then
        echo "screenshots: skipped: Xvfb or Mesa's lavapipe Vulkan driver missing (--no-install)" >&2
        exit 2
    fi
    if ! command -v apt-get >/dev/null; then
        echo "screenshots: skipped: no apt-get to install: $packages" >&2
        exit 2
    fi
    sudo=""
    if [ "$(id -u)" != 0 ]; then
        if ! sudo -n true 2>/dev/null; then
            echo "screenshots: skipped: not root and no password-less sudo to install: $packages" >&2
            exit 2
        fi
        sudo="sudo -n"
    fi
    echo "screenshots: apt-get install $packages"
    if ! { $sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq $packages >/dev/null; }; then
        echo "screenshots: skipped: apt-get install $packages failed" >&2
        exit 2
    fi
fi
command -v Xvfb >/dev/null || { echo "screenshots: skipped: no Xvfb after installing" >&2; exit 2; }
icd="$(lavapipe)"
[ -n "$icd" ] || { echo "screenshots: skipped: no lavapipe ICD in /usr/share/vulkan/icd.d" >&2; exit 2; }

# The same commands as .ci/run's render build and test build (the same package selection and
# features, so nothing is rebuilt there): the rendered views, then the headless sandbox.
cargo build --ignore-rust-version "${cargo_profile[@]}" -p simsync_suite --examples --features render || exit 1
cargo build --ignore-rust-version "${cargo_profile[@]}" --workspace --examples || exit 1
dir="${CARGO_TARGET_DIR:-target}/$profile/examples"

display=":97"
for d in 97 98 99 100 101; do
    [ -e "/tmp/.X11-unix/X$d" ] || [ -e "/tmp/.X$d-lock" ] || { display=":$d"; break; }
done
Xvfb "$display" -screen 0 1280x720x24 -nolisten tcp >/tmp/simsync-xvfb.log 2>&1 &
xvfb=$!
trap 'kill "$xvfb" 2>/dev/null' EXIT
for _ in 1 2 3 4 5 6 7 8 9 10; do
    [ -e "/tmp/.X11-unix/X${display#:}" ] && break
    sleep 0.5
done
kill -0 "$xvfb" 2>/dev/null || { echo "screenshots: skipped: Xvfb did not start (/tmp/simsync-xvfb.log)" >&2; exit 2; }
export DISPLAY="$display"
# Mesa's software rasterizer (lavapipe) is the only Vulkan device; X11, no Wayland.
export WGPU_BACKEND=vulkan
export VK_ICD_FILENAMES="$icd"
unset WAYLAND_DISPLAY
# winit wants a runtime directory (a headless machine often has none).
if [ -z "${XDG_RUNTIME_DIR:-}" ] || [ ! -d "$XDG_RUNTIME_DIR" ]; then
    XDG_RUNTIME_DIR="$(mktemp -d)"
    chmod 700 "$XDG_RUNTIME_DIR"
    export XDG_RUNTIME_DIR
fi

mkdir -p "$out"
status=0
# shoot NAME CHECK-ARGS -- VIEW-ARGS: runs the view, checks the PNG.
shoot() {
    local name="$1"; shift
    local checks=()
    while [ "$1" != "--" ]; do checks+=("$1"); shift; done
    shift
    local shot="$out/$name.png"
    rm -f "$shot"
    echo "screenshots: $name: sandbox_view $*"
    local start=$SECONDS
    if ! timeout 900 "$dir/sandbox_view" "$@" --no-vsync --screenshot "$shot"; then
        echo "screenshots: sandbox_view $name failed" >&2
        status=1
    fi
    echo "screenshots: $name took $((SECONDS - start)) s"
    if [ -f "$shot" ]; then
        python3 scripts/check_screenshot.py "$shot" "${checks[@]}" || status=1
    else
        echo "screenshots: $shot was not written" >&2
        status=1
    fi
}

shoot local -- local --ticks "$ticks" --quiet
echo "screenshots: headless summary of the same local run:"
"$dir/sandbox" local --ticks "$ticks" --quiet | tail -n 9 || status=1
shoot network -- network --ticks "$ticks" --quiet
echo "screenshots: headless summary of the same network run:"
"$dir/sandbox" network --ticks "$ticks" --quiet | grep -v elapsed_s || status=1
# Every owner colour on screen: at 480 scripted ticks participant 3 owns the ball carpet (its
# avatar's knock-on bids spread through the touching balls) and participants 1 and 2 own one to
# three bodies each besides their avatars, about 50 pixels a ball at this distance (163 blue and
# 133 red pixels at 480 ticks under lavapipe): 100 pixels is two balls.
shoot ownership --hues blue red green --min-hue-pixels 100 -- ownership --ticks "$ownership_ticks" --quiet
echo "screenshots: headless summary of the same ownership run:"
"$dir/sandbox" ownership --ticks "$ownership_ticks" --quiet | tail -n 30 || status=1
# Hybrid: three players rolled back, 300 props owned; the players' pushes and throws hand props
# to the participants, so their colours are on screen (a 960x540 window without MSAA: three
# sessions and three ownership worlds are stepped per frame under lavapipe).
shoot hybrid --hues blue red --min-hue-pixels 100 -- hybrid --players 3 --props 300 --ticks 200 \
    --quiet --no-msaa --window 960x540

# The final checksum of a join's log: `client: match 1 of 1: verified tick T, final checksum C,
# desyncs D` (printed by `sandbox join` and `sandbox_view join` alike).
final_line() { grep -m1 '^client: match 1 of 1: ' "$1" | sed 's/^client: match 1 of 1: //'; }

# join_match: the UDP match (see the top). Prints both clients' final lines and the time taken.
join_match() {
    local work start udp http pids=() rc0 rc1 line0 line1
    work="$(mktemp -d)"
    start=$SECONDS
    udp=$((20000 + RANDOM % 20000)); http=$((udp + 1))
    "$dir/sandbox" host --bind "127.0.0.1:$udp" --ops "127.0.0.1:$http" --players 2 \
        --tokens "$work/tokens" --quiet >"$work/host.log" 2>&1 &
    pids+=($!)
    for _ in $(seq 50); do [ -f "$work/tokens/slot1.token" ] && break; sleep 0.2; done
    if [ ! -f "$work/tokens/slot1.token" ]; then
        echo "screenshots: join: the host wrote no tokens ($work/host.log):" >&2
        tail -n 5 "$work/host.log" >&2
        kill "${pids[@]}" 2>/dev/null
        return 1
    fi
    # Small windows without MSAA: a client polls at most 8 ticks a frame, so below 8 frames a
    # second (lavapipe on a loaded machine) its clock falls behind and the relay replaces its
    # late inputs. The scripted window is the smallest: its inputs are the ones that must
    # arrive; player 0's are all "stand still" and its picture is the one checked.
    local view=(--ticks "$join_ticks" --quiet --no-vsync --no-msaa)
    echo "screenshots: join: sandbox host on 127.0.0.1:$udp, two sandbox_view join windows, $join_ticks ticks"
    timeout 300 "$dir/sandbox_view" join --token "$work/tokens/slot1.token" --window 160x90 \
        --trace assets/traces/push_pile.ron "${view[@]}" >"$work/player1.log" 2>&1 &
    pids+=($!)
    rm -f "$out/join-start.png" "$out/join.png"
    timeout 300 "$dir/sandbox_view" join --token "$work/tokens/slot0.token" --window 480x270 \
        "${view[@]}" --start-screenshot "$out/join-start.png" --screenshot "$out/join.png" \
        >"$work/player0.log" 2>&1
    rc0=$?
    wait "${pids[1]}"; rc1=$?
    # The room ends once both players left; the host then exits by itself.
    for _ in $(seq 25); do kill -0 "${pids[0]}" 2>/dev/null || break; sleep 0.2; done
    kill "${pids[0]}" 2>/dev/null
    line0="$(final_line "$work/player0.log")"; line1="$(final_line "$work/player1.log")"
    echo "screenshots: join: player 0 (shot):     exit $rc0, $line0"
    echo "screenshots: join: player 1 (scripted): exit $rc1, $line1"
    grep -h '"rtt_ms"\|"late_inputs"' "$work/player0.log" "$work/player1.log" | sed 's/^ */screenshots: join: /'
    echo "screenshots: join took $((SECONDS - start)) s (logs in $work)"
    local ok=0
    if [ "$rc0" != 0 ] || [ "$rc1" != 0 ]; then
        echo "screenshots: join: a client failed:" >&2
        tail -n 5 "$work/player0.log" "$work/player1.log" >&2
        ok=1
    fi
    if [ -z "$line0" ] || [ "$line0" != "$line1" ]; then
        echo "screenshots: join: the clients' final checksums differ or are missing" >&2
        ok=1
    fi
    # The crate stack's part of player 0's picture (480x270: right of the HUD, above the middle)
    # changed between the match's start and end: about 1,500 pixels when the stack is pushed
    # over (the same trace in local mode under lavapipe: 1,573), at most about 150 when only the
    # scripted player walks through.
    if [ -f "$out/join-start.png" ] && [ -f "$out/join.png" ]; then
        python3 scripts/check_screenshot.py "$out/join.png" --changed-from "$out/join-start.png" \
            --region 50,150,285,420 --min-changed-pixels 600 || ok=1
    else
        echo "screenshots: join: $out/join-start.png or $out/join.png was not written" >&2
        ok=1
    fi
    return $ok
}
join_match || status=1
exit $status
