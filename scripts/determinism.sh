#!/usr/bin/env bash
# Determinism across builds (simsync_deterministic's rules, "Determinism across builds and
# platforms"): one recorded scenario must replay with the same checksum at every tick in every
# build of the sandbox, with one task-pool thread and with one per core, and the sandbox must
# import none of the platform libm's transcendental functions.
#
#   scripts/determinism.sh [--ticks N] [--native] [--bench] [SANDBOX_BINARY...]
#   scripts/determinism.sh --symbols-only BINARY...   (any program: the libm import check only)
#
# Binaries: those given, else the debug and release builds of the `sandbox` example under
# $CARGO_TARGET_DIR (or target/) that exist (`cargo test` builds the debug one, scripts/netem.sh
# the release one). The first binary records `sandbox local --ticks N` (every tick's checksum);
# every binary then replays it with --threads 1 and --threads <cores>.
# --native: also build a release sandbox with `-C target-cpu=native` (AVX2, FMA, ... where the CPU
#   has them; the other builds use the baseline x86-64) into $CARGO_TARGET_DIR/native and check
#   it too. A full build of the dependencies: about 15 minutes on two cores.
# --bench: also run benches/physics_math.rs with and without `enhanced-determinism` and print
#   each plain tick and their ratio.
# Exit 0: every replay matched and no libm import; 1: a mismatch, a libm import or a failed
# build or benchmark; 2: nothing to check (no binary), a usage error or no `nm`.
set -uo pipefail
say() { echo "determinism: $*"; }
usage() { say "$1 (see --help)"; exit 2; }
ticks=600 native=0 bench=0 symbols_only=0 bins=()
while [ $# -gt 0 ]; do
    case "$1" in
        --ticks) [ $# -ge 2 ] || usage "--ticks needs a value"; ticks="$2"; shift 2 ;;
        --native) native=1; shift ;;
        --bench) bench=1; shift ;;
        --symbols-only) symbols_only=1; shift ;;
        -h|--help) sed -n '2,21p' "$0"; exit 0 ;;
        -*) usage "unknown option $1" ;;
        *) bins+=("$(cd "$(dirname "$1")" 2>/dev/null && pwd)/$(basename "$1")"); shift ;;
    esac
done
cd "$(dirname "$0")/.."
target="${CARGO_TARGET_DIR:-target}"
if [ ${#bins[@]} -eq 0 ]; then
    for b in "$target/debug/examples/sandbox" "$target/release/examples/sandbox"; do
        [ -x "$b" ] && bins+=("$b")
    done
fi
if [ "$native" = 1 ]; then
    say "building a release sandbox with -C target-cpu=native into $target/native"
    RUSTFLAGS="-C target-cpu=native" cargo build --ignore-rust-version --release --example sandbox \
        --target-dir "$target/native" || { say "FAIL: the native build"; exit 1; }
    bins+=("$target/native/release/examples/sandbox")
fi
if [ ${#bins[@]} -eq 0 ]; then
    say "no sandbox binary (build one: cargo build --ignore-rust-version --example sandbox)"
    exit 2
fi
# The platform libm's transcendental functions, by their C names.
libm='^(sin|cos|tan|asin|acos|atan|atan2|sinh|cosh|tanh|asinh|acosh|atanh|exp|exp2|exp10|expm1|log|log2|log10|log1p|pow|cbrt|hypot|sincos|erf|erfc|tgamma|lgamma)f?$'
check_symbols() {
    command -v nm >/dev/null || { say "nm not found: cannot check the libm imports"; exit 2; }
    local bin out found status=0
    for bin in "$@"; do
        if ! out="$(nm -D --undefined-only "$bin" 2>&1)"; then
            say "FAIL: nm $bin: $out"; status=1; continue
        fi
        found="$(echo "$out" | awk '{print $NF}' | sed 's/@.*//; s/^_//' | grep -E "$libm" | tr '\n' ' ')"
        if [ -n "$found" ]; then
            say "FAIL: $bin imports libm's $found"; status=1
        else
            say "ok: $bin imports no libm transcendental function"
        fi
    done
    return "$status"
}
if [ "$symbols_only" = 1 ]; then
    [ ${#bins[@]} -gt 0 ] || usage "--symbols-only needs a binary"
    check_symbols "${bins[@]}"
    exit $?
fi
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
failed=0
cores="$(nproc 2>/dev/null || echo 2)"
[ "$cores" -lt 2 ] && cores=2

# 1. One scenario, every tick's checksum recorded by the first build.
say "recording $ticks ticks with ${bins[0]}"
if ! "${bins[0]}" local --ticks "$ticks" --record "$work/run.replay" --quiet >"$work/record.log" 2>&1; then
    cat "$work/record.log"; say "FAIL: recording"; exit 1
fi

# 2. Every build replays it, with 1 thread and one per core.
for bin in "${bins[@]}"; do
    for threads in 1 "$cores"; do
        if out="$("$bin" replay "$work/run.replay" --threads "$threads" --quiet 2>&1)"; then
            say "ok: $bin --threads $threads: ${out##*: }"
        else
            echo "$out"; say "FAIL: $bin --threads $threads"; failed=1
        fi
    done
done

# 3. No transcendental function of the platform's libm in any build.
check_symbols "${bins[@]}" || failed=1

# 4. What the portable math costs (optional).
if [ "$bench" = 1 ]; then
    command -v python3 >/dev/null || { say "FAIL: --bench needs python3"; exit 1; }
    cargo bench --ignore-rust-version --bench physics_math -- --noplot >"$work/bench.log" 2>&1 \
        && cargo bench --ignore-rust-version --bench physics_math --no-default-features -- --noplot >>"$work/bench.log" 2>&1 \
        || { tail -20 "$work/bench.log"; say "FAIL: the benchmark"; exit 1; }
    for id in gas/262 pile/262 pile/1000; do
        p="$(python3 -c "import json,sys;print(json.load(open(sys.argv[1]))['median']['point_estimate'])" "$target/criterion/plain_tick_portable_math/$id/new/estimates.json")"
        q="$(python3 -c "import json,sys;print(json.load(open(sys.argv[1]))['median']['point_estimate'])" "$target/criterion/plain_tick_platform_math/$id/new/estimates.json")"
        python3 -c "import sys;p,q=float(sys.argv[2]),float(sys.argv[3]);print(f'determinism: plain tick {sys.argv[1]}: portable {p/1e3:.1f} us, platform {q/1e3:.1f} us, ratio {p/q:.3f}')" "$id" "$p" "$q"
    done
fi

[ "$failed" = 0 ] && say "every build agreed at every tick" || say "FAILED"
exit "$failed"
