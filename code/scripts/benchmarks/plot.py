"""`--mode plot`: the README's two plots (speed.svg, scaling.svg) drawn from the recorded figures.

`--record FILE` adds a run's figures to a small JSON file (common.record); this draws them as
SVG written here by hand (no plotting library), so the same figures always give the same bytes.
"""

from __future__ import annotations

import argparse
import html
import json
import os
from typing import Any

from .scaling import SCALING_TARGET_SHARE
from .transports import TARGET_CEILING_SHARE

__all__ = ["run", "scaling_svg", "speed_svg"]

STORE_NAMES = {"memory": "memory (the lesson's)", "sqlite": "SQLite", "postgres": "PostgreSQL", "folder": "folder"}
STORE_COLOURS = {"memory": "#888888", "sqlite": "#0072b2", "postgres": "#009e73", "folder": "#d55e00"}
FLOOR_COLOUR, SERVER_COLOUR, GOAL_COLOUR = "#9ecae1", "#08519c", "#cc0000"


def svg(width: int, height: int, title: str, body: list[str]) -> str:
    """A whole SVG document: a white page, its title for screen readers, then `body`."""
    return "\n".join(
        [
            f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}"'
            ' font-family="sans-serif" font-size="12">',
            f"<title>{html.escape(title)}</title>",
            f'<rect width="{width}" height="{height}" fill="#ffffff"/>',
            f'<text x="{width / 2:.0f}" y="20" text-anchor="middle" font-size="14" font-weight="bold">'
            f"{html.escape(title)}</text>",
            *body,
            "</svg>",
            "",
        ]
    )


def text(x: float, y: float, words: str, anchor: str = "start", extra: str = "") -> str:
    """One SVG text element at (x, y)."""
    return f'<text x="{x:.1f}" y="{y:.1f}" text-anchor="{anchor}"{extra}>{html.escape(words)}</text>'


def speed_svg(runs: list[dict[str, Any]]) -> str:
    """Per run, the floor's and the server's round trips/s as a share of the canned responder's, and the goal."""
    left, right, top, row_height = 110, 590, 76, 28
    height = top + row_height * len(runs) + 44
    x = lambda share: left + (right - left) * share  # noqa: E731 - share 0..1 to a pixel column
    body = [
        f'<rect x="{left}" y="34" width="12" height="10" fill="{FLOOR_COLOUR}"/>',
        text(left + 16, 43, "the floor: canned + sign, verify, claim"),
        f'<rect x="{left + 290}" y="34" width="12" height="10" fill="{SERVER_COLOUR}"/>',
        text(left + 306, 43, "the server (serve.py)"),
    ]
    for tick in range(0, 101, 20):
        body.append(
            f'<line x1="{x(tick / 100):.1f}" y1="{top - 6}" x2="{x(tick / 100):.1f}" y2="{height - 38}"'
            ' stroke="#dddddd"/>'
        )
        body.append(text(x(tick / 100), height - 24, f"{tick} %", "middle"))
    counts: dict[str, int] = {}
    for index, run in enumerate(runs):
        counts[run["transport"]] = counts.get(run["transport"], 0) + 1
        y = top + index * row_height
        label = f"{'HTTP' if run['transport'] == 'http' else run['transport']}, run {counts[run['transport']]}"
        body.append(text(left - 8, y + 15, label, "end"))
        for offset, part, colour in ((0, "floor", FLOOR_COLOUR), (11, "server", SERVER_COLOUR)):
            share = run[part] / run["ceiling"]
            body.append(
                f'<rect class="{part}" x="{left}" y="{y + offset}" width="{x(share) - left:.1f}"'
                f' height="10" fill="{colour}"/>'
            )
            body.append(text(x(share) + 4, y + offset + 9, f"{share:.0%}".replace("%", " %"), extra=' font-size="10"'))
    goal = x(TARGET_CEILING_SHARE)
    body.append(
        f'<line x1="{goal:.1f}" y1="{top - 6}" x2="{goal:.1f}" y2="{height - 38}"'
        f' stroke="{GOAL_COLOUR}" stroke-dasharray="5,3"/>'
    )
    body.append(
        text(goal, top - 10, f"goal {TARGET_CEILING_SHARE:.0%}".replace("%", " %"), "middle", f' fill="{GOAL_COLOUR}"')
    )
    body.append(
        text(
            (left + right) / 2,
            height - 6,
            "round trips/s as a share of the canned responder's (same client, same run)",
            "middle",
        )
    )
    return svg(640, height, "Round trips/s beside a canned responder", body)


def scaling_svg(scaling: dict[str, Any]) -> str:
    """Per store, round trips/s over stdio at each note count as a share of its own 10-note rate, and the goal."""
    notes, rates = scaling["notes"], scaling["rates"]
    shares = {kind: [None if rate is None else rate / values[0] for rate in values] for kind, values in rates.items()}
    top_share = max(1.0, max(share for values in shares.values() for share in values if share is not None))
    top_share = -(-top_share * 10 // 1) / 10  # up to the next 10 %
    left, right, top, bottom = 70, 420, 40, 280
    x = lambda index: left + (right - left) * index / (len(notes) - 1)  # noqa: E731 - note counts, evenly spaced
    y = lambda share: bottom - (bottom - top) * share / top_share  # noqa: E731
    body = []
    for tick in range(0, int(top_share * 100) + 1, 20):
        body.append(
            f'<line x1="{left}" y1="{y(tick / 100):.1f}" x2="{right}" y2="{y(tick / 100):.1f}" stroke="#dddddd"/>'
        )
        body.append(text(left - 6, y(tick / 100) + 4, f"{tick} %", "end"))
    for index, count in enumerate(notes):
        body.append(text(x(index), bottom + 18, f"{count:,}", "middle"))
    body.append(text((left + right) / 2, bottom + 36, "notes in the workspace", "middle"))
    goal = y(SCALING_TARGET_SHARE)
    body.append(
        f'<line x1="{left}" y1="{goal:.1f}" x2="{right}" y2="{goal:.1f}"'
        f' stroke="{GOAL_COLOUR}" stroke-dasharray="5,3"/>'
    )
    body.append(
        text(
            right,
            goal - 5,
            f"goal at {notes[-1]:,}: {SCALING_TARGET_SHARE:.0%}".replace("%", " %"),
            "end",
            f' fill="{GOAL_COLOUR}"',
        )
    )
    for place, (kind, values) in enumerate(shares.items()):
        colour = STORE_COLOURS.get(kind, "#000000")
        points = [(x(index), y(share)) for index, share in enumerate(values) if share is not None]
        dash = ' stroke-dasharray="2,3"' if kind == "memory" else ""
        body.append(
            f'<polyline class="store" points="{" ".join(f"{px:.1f},{py:.1f}" for px, py in points)}"'
            f' fill="none" stroke="{colour}" stroke-width="2"{dash}/>'
        )
        body += [f'<circle cx="{px:.1f}" cy="{py:.1f}" r="3" fill="{colour}"/>' for px, py in points]
        last = max(index for index, share in enumerate(values) if share is not None)
        kept = f"{values[last]:.0%}".replace("%", " %") + f" at {notes[last]:,}"
        legend_y = top + 10 + place * 50
        body.append(
            f'<line x1="440" y1="{legend_y - 4}" x2="462" y2="{legend_y - 4}"'
            f' stroke="{colour}" stroke-width="2"{dash}/>'
        )
        body.append(text(468, legend_y, STORE_NAMES.get(kind, kind), extra=' font-weight="bold"'))
        body.append(text(468, legend_y + 15, f"keeps {kept}"))
        if last < len(notes) - 1:
            body.append(text(468, legend_y + 30, f"not served at {notes[last + 1]:,}"))
    body.append(
        text(
            14,
            (top + bottom) / 2,
            "share of its 10-note rate",
            "middle",
            f' transform="rotate(-90 14 {(top + bottom) / 2:.0f})"',
        )
    )
    return svg(640, 330, "Round trips/s over stdio as the notes grow", body)


def plot(figures_path: str, out: str) -> list[str]:
    """Write speed.svg and scaling.svg into `out` from the recorded figures; the paths written."""
    with open(figures_path, encoding="utf-8") as handle:
        figures = json.load(handle)
    written = []
    for name, draw, key in (("speed.svg", speed_svg, "speed"), ("scaling.svg", scaling_svg, "scaling")):
        if figures.get(key):
            path = os.path.join(out, name)
            with open(path, "w", encoding="utf-8") as handle:
                handle.write(draw(figures[key]))
            written.append(path)
    return written


def run(args: argparse.Namespace) -> list[str]:
    """`--mode plot`: draw both plots from `--figures` into `--out` and print each path written."""
    written = plot(args.figures, args.out)
    for path in written:
        print(path)
    return written
