#!/usr/bin/env python3
"""Checks a sandbox_view screenshot (PNG, 8-bit RGB/RGBA, non-interlaced), standard library only.

usage: check_screenshot.py PATH [--colors R,G,B ...]

Fails (exit 1) when the picture is blank (fewer than 8 distinct colours or one colour covering
more than 97 % of it), when the HUD is missing (no near-white pixels inside the dark HUD box in
the top-left corner), or when a --colors entry has fewer than 50 pixels within 60 of it (sum of
channel differences). Exit 2 for an unreadable file.
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


def main(argv):
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    path, wanted = argv[1], []
    if "--colors" in argv:
        for spec in argv[argv.index("--colors") + 1:]:
            wanted.append(tuple(int(v) for v in spec.split(",")))
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
    hud = [p for row in pixels[8:200] for p in row[8:420] if min(p) > 200]
    if len(hud) < 100:
        failures.append(f"no HUD text: {len(hud)} near-white pixels in the HUD box")
    for colour in wanted:
        near = sum(
            n for p, n in counts.items() if sum(abs(a - b) for a, b in zip(p, colour)) <= 60
        )
        if near < 50:
            failures.append(f"colour {colour}: {near} pixels")
    print(
        f"{path}: {width}x{height}, {len(counts)} colours, HUD pixels {len(hud)}"
        + "".join(f"; FAIL {f}" for f in failures)
    )
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
