"""The diagrams, drawn as plain SVG at build time (no script, nothing fetched by the reader's browser).

- ``images/message-path.svg``: a message's way from a producer through the queue, the listener, the handler and
  completion (deleted, released for another attempt, or moved to the poison queue), with the lease scheduler.
- ``images/lease-timeline.svg``: one message's lease over time at the host's defaults (read from ``HostConfig``, so
  the picture follows them): renewals while the handler runs, and what happens after a crash.
"""

from __future__ import annotations

from html import escape

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import File, Files

from worker.settings.config import HostConfig

FONT = "font-family='system-ui, sans-serif' font-size='13'"
INK, PAPER, ACCENT, WARN, MUTED = "#1f2937", "#ffffff", "#3f51b5", "#c62828", "#6b7280"


def on_files(files: Files, config: MkDocsConfig) -> Files:
    files.append(File.generated(config, "images/message-path.svg", content=message_path()))
    files.append(File.generated(config, "images/lease-timeline.svg", content=lease_timeline()))
    return files


def _svg(width: int, height: int, body: list[str], title: str) -> str:
    return "\n".join(
        [
            f"<svg xmlns='http://www.w3.org/2000/svg' viewBox='0 0 {width} {height}' width='{width}' height='{height}' "
            f"role='img' aria-label='{escape(title)}'>",
            f"<title>{escape(title)}</title>",
            "<defs><marker id='arrow' viewBox='0 0 10 10' refX='9' refY='5' markerWidth='7' markerHeight='7' "
            f"orient='auto-start-reverse'><path d='M0,0 L10,5 L0,10 z' fill='{INK}'/></marker></defs>",
            f"<rect width='{width}' height='{height}' fill='{PAPER}'/>",
            *body,
            "</svg>",
            "",
        ]
    )


def _box(x: int, y: int, w: int, h: int, lines: list[str], color: str = ACCENT) -> str:
    bold = " font-weight='bold'"
    texts = "".join(
        f"<text x='{x + w / 2}' y='{y + h / 2 + (i - (len(lines) - 1) / 2) * 16 + 4}' text-anchor='middle' {FONT} "
        f"fill='{INK}'{bold if i == 0 else ''}>{escape(line)}</text>"
        for i, line in enumerate(lines)
    )
    return f"<rect x='{x}' y='{y}' width='{w}' height='{h}' rx='8' fill='{PAPER}' stroke='{color}' stroke-width='2'/>{texts}"


def _arrow(x1: float, y1: float, x2: float, y2: float, label: str = "", dy: int = -6, color: str = INK) -> str:
    text = (
        (
            f"<text x='{(x1 + x2) / 2}' y='{(y1 + y2) / 2 + dy}' text-anchor='middle' {FONT} "
            f"fill='{MUTED}'>{escape(label)}</text>"
        )
        if label
        else ""
    )
    return (
        f"<line x1='{x1}' y1='{y1}' x2='{x2}' y2='{y2}' stroke='{color}' stroke-width='1.6' marker-end='url(#arrow)'/>{text}"
    )


def message_path() -> str:
    w, h, top = 170, 56, 60
    xs = [10, 230, 450, 670, 890]
    mid = top + h / 2
    body = [
        _box(xs[0], top, w, h, ["producer", "worker send, an output"]),
        _box(xs[1], top, w, h, ["queue", "one of four backends"]),
        _box(xs[2], top, w, h, ["listener", "receives batchSize"]),
        _box(xs[3], top, w, h, ["handler", "your function"]),
        _box(xs[4], top, w, h, ["completion", "settles the message"]),
        _box(xs[2], 170, w * 2 + 50, 50, ["lease scheduler", "renews every held lease at half its length"], MUTED),
        _box(xs[4], 170, w, 40, ["deleted"], ACCENT),
        _box(xs[4], 225, w, 40, ["released: retried later"], MUTED),
        _box(xs[4], 280, w, 40, ["<queue>-poison"], WARN),
        *(_arrow(xs[i] + w, mid, xs[i + 1] - 2, mid, label) for i, label in enumerate(["put", "lease", "invoke", "result"])),
        _arrow(xs[2] + w + 25, 168, xs[2] + w + 25, top + h + 2, "", 0, MUTED),
        _arrow(xs[4] + w / 2, top + h, xs[4] + w / 2, 168, ""),
        f"<text x='{xs[4] + w / 2 + 8}' y='150' {FONT} fill='{MUTED}'>success</text>",
        f"<path d='M {xs[4] + w} {top + 40} C {xs[4] + w + 50} 130, {xs[4] + w + 50} 230, {xs[4] + w + 2} 245' "
        f"fill='none' stroke='{INK}' stroke-width='1.6' marker-end='url(#arrow)'/>",
        f"<text x='{xs[4] + w + 30}' y='190' {FONT} fill='{MUTED}'>failure</text>",
        f"<path d='M {xs[4]} {top + 45} C {xs[4] - 40} 200, {xs[4] - 40} 290, {xs[4] - 2} 300' fill='none' "
        f"stroke='{WARN}' stroke-width='1.6' marker-end='url(#arrow)'/>",
        f"<text x='{xs[4] - 45}' y='315' text-anchor='end' {FONT} fill='{WARN}'>last attempt, or Poison</text>",
        f"<path d='M {xs[4]} 245 C 480 320, 300 320, {xs[1] + w / 2} {top + h + 2}' fill='none' stroke='{MUTED}' "
        "stroke-dasharray='5 4' stroke-width='1.4' marker-end='url(#arrow)'/>",
        f"<text x='{xs[1] + w / 2 + 20}' y='310' {FONT} fill='{MUTED}'>visible again after visibilityTimeout</text>",
    ]
    return _svg(1130, 340, body, "The path of a message")


def lease_timeline() -> str:
    defaults = HostConfig()
    lease = defaults.lease_duration / 60
    step = lease * defaults.lease_renewal_fraction
    left, width, scale_minutes = 150, 760, 3 * lease

    def x(minutes: float) -> float:
        return left + width * minutes / scale_minutes

    body = [
        f"<text x='10' y='24' {FONT} font-weight='bold' fill='{INK}'>A lease at the defaults: "
        f"worker.leaseDuration {lease:g} min, renewed every {step:g} min "
        f"(leaseRenewalFraction {defaults.lease_renewal_fraction:g})</text>"
    ]
    for minute in range(0, int(scale_minutes) + 1, 5):
        body.append(
            f"<line x1='{x(minute)}' y1='240' x2='{x(minute)}' y2='246' stroke='{MUTED}'/>"
            f"<text x='{x(minute)}' y='262' text-anchor='middle' {FONT} fill='{MUTED}'>{minute} min</text>"
        )
    body.append(f"<line x1='{left}' y1='240' x2='{left + width}' y2='240' stroke='{MUTED}'/>")
    # A handler that runs 22 minutes: renewed at every step, deleted when it returns.
    run = 22.0
    body.append(f"<text x='10' y='78' {FONT} fill='{INK}'>handler runs</text>")
    body.append(f"<rect x='{x(0)}' y='64' width='{x(run) - x(0)}' height='20' rx='4' fill='{ACCENT}' opacity='0.25'/>")
    renewal, end = 0.0, lease
    while renewal + step < run:
        renewal += step
        body.append(f"<line x1='{x(renewal)}' y1='58' x2='{x(renewal)}' y2='90' stroke='{ACCENT}' stroke-width='2'/>")
        end = renewal + lease
    body.append(f"<text x='{x(run) + 6}' y='78' {FONT} fill='{INK}'>returns: deleted</text>")
    body.append(f"<text x='10' y='112' {FONT} fill='{MUTED}'>lease held</text>")
    body.append(f"<rect x='{x(0)}' y='100' width='{x(run) - x(0)}' height='14' fill='{ACCENT}' opacity='0.6'/>")
    body.append(f"<text x='{x(step)}' y='52' text-anchor='middle' {FONT} fill='{ACCENT}'>renewals</text>")
    # The same message when the worker is killed at minute 7: nobody renews; it is visible when the lease ends.
    crash = 7.0
    body.append(f"<text x='10' y='168' {FONT} fill='{INK}'>worker killed</text>")
    body.append(f"<rect x='{x(0)}' y='154' width='{x(crash) - x(0)}' height='20' rx='4' fill='{WARN}' opacity='0.25'/>")
    body.append(f"<text x='{x(crash)}' y='170' {FONT} fill='{WARN}'> ✕ kill -9</text>")
    last = step * int(crash // step)
    body.append(f"<rect x='{x(0)}' y='186' width='{x(last + lease) - x(0)}' height='14' fill='{WARN}' opacity='0.5'/>")
    body.append(f"<text x='10' y='198' {FONT} fill='{MUTED}'>invisible until</text>")
    body.append(_arrow(x(last + lease), 214, x(last + lease) + 70, 214, ""))
    body.append(
        f"<text x='{x(last + lease) + 78}' y='218' {FONT} fill='{INK}'>visible again: another worker takes it</text>"
    )
    del end
    return _svg(960, 280, body, "A lease over time")
