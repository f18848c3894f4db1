#!/usr/bin/env bash
# Proof by picture: runs the rendered sandbox (`sandbox_view`, `render` feature) under Xvfb with
# Mesa's software Vulkan driver (lavapipe), saves a screenshot through Bevy's screenshot API and
# checks it (not blank, HUD present) with scripts/check_screenshot.py, then writes
# docs/screenshots/local.png.
#
# usage: scripts/screenshots.sh [--no-install] [--ticks N]
# Installs xvfb, mesa-vulkan-drivers, libvulkan1 and the X11 runtime libraries with apt-get
# (root or sudo) unless --no-install. Exit 0 ok, 1 a check failed, 2 the environment could not
# be set up (no apt, no X server, no Vulkan adapter): what was tried is printed.
set -uo pipefail
cd "$(dirname "$0")/.."

install=1
ticks=300
while [ $# -gt 0 ]; do
    case "$1" in
        --no-install) install=0 ;;
        --ticks) ticks="$2"; shift ;;
        *) echo "usage: $0 [--no-install] [--ticks N]" >&2; exit 2 ;;
    esac
    shift
done

packages="xvfb xauth mesa-vulkan-drivers libvulkan1 libx11-6 libxcursor1 libxi6 libxrandr2 libxkbcommon-x11-0 libx11-xcb1 x11-utils"
if [ "$install" = 1 ]; then
    sudo=""
    [ "$(id -u)" = 0 ] || sudo="sudo"
    if ! command -v apt-get >/dev/null; then
        echo "screenshots: skipped: apt-get not available to install: $packages" >&2
        exit 2
    fi
    $sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq $packages >/dev/null \
        || { echo "screenshots: skipped: apt-get install $packages failed" >&2; exit 2; }
fi
command -v Xvfb >/dev/null || { echo "screenshots: skipped: no Xvfb" >&2; exit 2; }

cargo build --features render --example sandbox_view || exit 1
bin="${CARGO_TARGET_DIR:-target}/debug/examples/sandbox_view"

display=":97"
Xvfb "$display" -screen 0 1280x720x24 -nolisten tcp >/tmp/simsync-xvfb.log 2>&1 &
xvfb=$!
trap 'kill "$xvfb" 2>/dev/null' EXIT
sleep 2
export DISPLAY="$display"
# Mesa's software rasterizer (lavapipe) is the only Vulkan device; no audio, no Wayland.
export WGPU_BACKEND=vulkan
export VK_ICD_FILENAMES="$(ls /usr/share/vulkan/icd.d/lvp_icd.*.json 2>/dev/null | head -1)"
[ -n "$VK_ICD_FILENAMES" ] || { echo "screenshots: skipped: no lavapipe ICD in /usr/share/vulkan/icd.d" >&2; exit 2; }
unset WAYLAND_DISPLAY

mkdir -p docs/screenshots
status=0
shot="docs/screenshots/local.png"
rm -f "$shot"
echo "screenshots: local mode, $ticks ticks"
if ! timeout 600 "$bin" --ticks "$ticks" --screenshot "$shot"; then
    echo "screenshots: sandbox_view local failed" >&2
    status=1
fi
echo "screenshots: headless summary of the same run:"
"${CARGO_TARGET_DIR:-target}/debug/examples/sandbox" local --ticks "$ticks" --quiet 2>/dev/null | tail -n 20 || true
if [ -f "$shot" ]; then
    python3 scripts/check_screenshot.py "$shot" || status=1
else
    echo "screenshots: $shot was not written" >&2
    status=1
fi
exit $status
