#!/usr/bin/env python3
"""Checks a sandbox_view screenshot (PNG, 8-bit RGB/RGBA, non-interlaced), standard library only.

usage: check_screenshot.py PATH [--colors R,G,B ...] [--hues NAME ...] [--min-hue-pixels N]
                          [--changed-from START --region TOP,BOTTOM,LEFT,RIGHT
                           --min-changed-pixels N]

Fails (exit 1) when the picture is blank (fewer than 8 distinct colours or one colour covering
more than 97 % of it), when the HUD is missing (no near-white pixels inside the dark HUD box in
the top-left corner), when a --colors entry has fewer than 50 pixels within 60 of it (sum of
channel differences), or when a --hues entry (red, green, blue, yellow: a channel clearly above
the others, as lit and tone-mapped owner colours are) has fewer than N pixels outside the HUD
box (--min-hue-pixels, default 200), or, with --changed-from, when fewer than N pixels of the
region (rows TOP..BOTTOM, columns LEFT..RIGHT, end exclusive) differ by more than 60 (sum of
channel differences) from the same pixels of START, a screenshot of the same window taken
earlier (--min-changed-pixels, default 500): what stood there has moved. Exit 2 for an unreadable
file or bad arguments.
"""
import struct
import sys
import zlib


def read_png(path):
    with open(path, "rb") as f:
        data = f.read()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        raise ValueError("not a PNG")
    pos, idat, header = 8, b"", None
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos:pos + 4])
        kind = data[pos + 4:pos + 8]
        body = data[pos + 8:pos + 8 + length]
        pos += 12 + length
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
    width, height, depth, colour, _, _, interlace = header
    if depth != 8 or colour not in (2, 6) or interlace:
        raise ValueError(f"unsupported PNG (depth {depth}, colour type {colour})")
    channels = 3 if colour == 2 else 4
    raw = zlib.decompress(idat)
    stride = width * channels
    rows, prev = [], bytearray(stride)
    for y in range(height):
        start = y * (stride + 1)
        kind, line = raw[start], bytearray(raw[start + 1:start + 1 + stride])
        for i in range(stride):
            a = line[i - channels] if i >= channels else 0
            b = prev[i]
            c = prev[i - channels] if i >= channels else 0
            if kind == 1:
                line[i] = (line[i] + a) & 255
            elif kind == 2:
                line[i] = (line[i] + b) & 255
            elif kind == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif kind == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                pred = a if pa <= pb and pa <= pc else (b if pb <= pc else c)
                line[i] = (line[i] + pred) & 255
        rows.append(line)
        prev = line
    pixels = [
        [tuple(row[x * channels:x * channels + 3]) for x in range(width)] for row in rows
    ]
    return width, height, pixels


HUES = {
    "red": lambda r, g, b: r > g + 60 and r > b + 60,
    "green": lambda r, g, b: g > r + 40 and g > b + 40,
    "blue": lambda r, g, b: b > r + 40 and b > g + 20,
    "yellow": lambda r, g, b: r > b + 80 and g > b + 80 and abs(r - g) < 50,
}
HUD_BOX = (8, 260, 8, 620)  # rows, columns: top, bottom, left, right


def option_values(argv, flag):
    """The arguments after FLAG up to the next option."""
    if flag not in argv:
        return []
    values = []
    for arg in argv[argv.index(flag) + 1:]:
        if arg.startswith("--"):
            break
        values.append(arg)
    return values


def changed_pixels(pixels, start, region):
    """Pixels of REGION (top, bottom, left, right) that differ by more than 60 between the two."""
    top, bottom, left, right = region
    return sum(
        1
        for y in range(top, bottom)
        for x in range(left, right)
        if sum(abs(a - b) for a, b in zip(pixels[y][x], start[y][x])) > 60
    )


def change_args(argv):
    """(START path, region, minimum) of --changed-from, or None; ValueError for bad values."""
    (start,) = option_values(argv, "--changed-from") or [None]
    if start is None:
        return None
    (region,) = option_values(argv, "--region")
    region = tuple(int(v) for v in region.split(","))
    if len(region) != 4 or region[0] >= region[1] or region[2] >= region[3] or min(region) < 0:
        raise ValueError(f"bad --region {region}")
    (minimum,) = option_values(argv, "--min-changed-pixels") or ["500"]
    return start, region, int(minimum)


def main(argv):
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    path = argv[1]
    try:
        wanted = [tuple(int(v) for v in spec.split(",")) for spec in option_values(argv, "--colors")]
    except ValueError:
        print(f"bad --colors: {option_values(argv, '--colors')}", file=sys.stderr)
        return 2
    hues = option_values(argv, "--hues")
    try:
        (min_hue_pixels,) = option_values(argv, "--min-hue-pixels") or ["200"]
        min_hue_pixels = int(min_hue_pixels)
    except ValueError:
        print(f"bad --min-hue-pixels: {option_values(argv, '--min-hue-pixels')}", file=sys.stderr)
        return 2
    try:
        change = change_args(argv)
    except ValueError as error:
        print(f"bad --changed-from, --region or --min-changed-pixels: {error}", file=sys.stderr)
        return 2
    unknown = [h for h in hues if h not in HUES]
    if unknown:
        print(f"unknown --hues {unknown}; known: {sorted(HUES)}", file=sys.stderr)
        return 2
    try:
        width, height, pixels = read_png(path)
    except (OSError, ValueError, zlib.error, TypeError, struct.error) as error:
        print(f"{path}: unreadable: {error}", file=sys.stderr)
        return 2
    counts = {}
    for row in pixels[::2]:
        for p in row[::2]:
            counts[p] = counts.get(p, 0) + 1
    total = sum(counts.values())
    top = max(counts.values())
    failures = []
    if len(counts) < 8 or top > 0.97 * total:
        failures.append(f"blank: {len(counts)} colours, the commonest covers {top / total:.0%}")
    top, bottom, left, right = HUD_BOX
    hud = [p for row in pixels[top:bottom] for p in row[left:right] if min(p) > 200]
    if len(hud) < 100:
        failures.append(f"no HUD text: {len(hud)} near-white pixels in the HUD box")
    for colour in wanted:
        near = sum(
            n for p, n in counts.items() if sum(abs(a - b) for a, b in zip(p, colour)) <= 60
        )
        if near < 50:
            failures.append(f"colour {colour}: {near} pixels")
    hue_counts = {}
    for name in hues:
        test = HUES[name]
        hue_counts[name] = sum(
            1
            for y, row in enumerate(pixels)
            for x, p in enumerate(row)
            if not (top <= y < bottom and left <= x < right) and test(*p)
        )
        if hue_counts[name] < min_hue_pixels:
            failures.append(f"hue {name}: {hue_counts[name]} pixels")
    changed = None
    if change is not None:
        start_path, region, minimum = change
        try:
            start_width, start_height, start = read_png(start_path)
        except (OSError, ValueError, zlib.error, TypeError, struct.error) as error:
            print(f"{start_path}: unreadable: {error}", file=sys.stderr)
            return 2
        if (start_width, start_height) != (width, height) or region[1] > height or region[3] > width:
            print(f"{start_path}: {start_width}x{start_height}, region {region}: "
                  f"does not fit {width}x{height}", file=sys.stderr)
            return 2
        changed = changed_pixels(pixels, start, region)
        if changed < minimum:
            failures.append(f"region {region}: {changed} pixels changed since {start_path}")
    print(
        f"{path}: {width}x{height}, {len(counts)} colours, HUD pixels {len(hud)}"
        + "".join(f", {name} pixels {n}" for name, n in hue_counts.items())
        + (f", changed pixels {changed}" if changed is not None else "")
        + "".join(f"; FAIL {f}" for f in failures)
    )
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
