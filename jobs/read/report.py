"""``ackstate report``: backlog, ack holes and redeliveries over time, as a PNG and an HTML page.

The history comes from Delta itself: ``cursors`` is read at up to ``--points`` versions of its
log (time travel), spread evenly over the versions VACUUM has left readable, and every row of
every version read is one point of its subscription (``msg_backlog``,
``non_contiguous_deleted_ranges``) at the event time it describes (``last_event_time``, the
partition's clock when the row was written). ``redeliveries`` is read at its own versions the
same way, and each redelivery request (a position and the event time it was requested at)
counts once, in the time bucket of its request.

Two layers, as in ``jobs.read.stats``: ``Series``/``build_series``/``render_png``/``render_html`` are
pure (no Spark) and the command function reads the tables.
"""

from __future__ import annotations

import argparse
import base64
import html
import logging
import math
import tempfile
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from engine.topic import partition_name
from jobs.platform import locations
from jobs.platform.errors import ReportError
from jobs.read.stats import TopicFilter

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger("ackstate.report")

WIDTH_IN, HEIGHT_IN, DPI = 12.0, 9.0, 100
"""The PNG is WIDTH_IN x HEIGHT_IN inches at DPI: 1200 x 900 pixels."""
PNG_NAME, HTML_NAME = "report.png", "report.html"


# ---- pure part ------------------------------------------------------------------------------
@dataclass
class Series:
    """One subscription's points, sorted by event time (epoch ms)."""

    name: str
    times: list[int] = field(default_factory=list)
    backlog: list[int] = field(default_factory=list)
    holes: list[int] = field(default_factory=list)

    @property
    def peak(self) -> tuple[int, int]:
        return (max(self.backlog, default=0), max(self.holes, default=0))


def build_series(
    rows: Iterable[Mapping[str, Any]],
    *,
    top: int = 8,
    topic: TopicFilter | None = None,
    subscription: str | None = None,
) -> list[Series]:
    """Cursor rows (``topic``, ``partition``, ``subscription``, ``last_event_time``,
    ``msg_backlog``, ``non_contiguous_deleted_ranges``; one per subscription and version read)
    -> the ``top`` subscriptions with the largest backlog (then ack holes) at any time.

    Rows that repeat a point (a subscription the versions read did not change) count once; for
    one subscription at one event time the largest values win (versions of a batch in flight).
    """
    points: dict[str, dict[int, tuple[int, int]]] = {}
    for row in rows:
        t, p, sub = row["topic"], row["partition"], row["subscription"]
        if (topic is not None and not topic.matches(t, p)) or (
            subscription is not None and sub != subscription
        ):
            continue
        when = row["last_event_time"]
        if when is None:
            continue
        name = f"{partition_name(t, p)} {sub}"
        value = (int(row["msg_backlog"] or 0), int(row["non_contiguous_deleted_ranges"] or 0))
        series = points.setdefault(name, {})
        series[int(when)] = max(series.get(int(when), value), value)
    result = []
    for name, by_time in points.items():
        times = sorted(by_time)
        result.append(Series(name, times, [by_time[t][0] for t in times], [by_time[t][1] for t in times]))
    result.sort(key=lambda s: (s.peak, s.name), reverse=True)
    return result[:top]


def bucket_redeliveries(
    rows: Iterable[Mapping[str, Any]],
    names: Sequence[str],
    *,
    buckets: int = 40,
    topic: TopicFilter | None = None,
    subscription: str | None = None,
) -> tuple[list[int], dict[str, list[int]], int]:
    """Distinct redelivery requests (``topic``, ``partition``, ``subscription``, ``ledger_id``,
    ``entry_id``, ``requested_at``) counted per time bucket: (bucket starts in epoch ms,
    counts per subscription series name, bucket width in ms). Subscriptions not in ``names``
    are summed as ``other``."""
    seen: set[tuple[Any, ...]] = set()
    requests: list[tuple[int, str]] = []
    for row in rows:
        t, p, sub = row["topic"], row["partition"], row["subscription"]
        if (topic is not None and not topic.matches(t, p)) or (
            subscription is not None and sub != subscription
        ):
            continue
        key = (t, p, sub, row["ledger_id"], row["entry_id"], row["requested_at"])
        if row["requested_at"] is None or key in seen:
            continue
        seen.add(key)
        name = f"{partition_name(t, p)} {sub}"
        requests.append((int(row["requested_at"]), name if name in names else "other"))
    if not requests:
        return [], {}, 0
    first, last = min(r[0] for r in requests), max(r[0] for r in requests)
    width = _nice_width(max(1, last - first + 1) / buckets)
    start = first - first % width
    n = (last - start) // width + 1
    counts: dict[str, list[int]] = {}
    for when, name in requests:
        counts.setdefault(name, [0] * n)[(when - start) // width] += 1
    return [start + i * width for i in range(n)], counts, width


def _nice_width(raw: float) -> int:
    """The first round width (100 ms ... 1 day, then whole days) not below ``raw`` ms."""
    units = [
        100,
        200,
        500,
        1_000,
        5_000,
        10_000,
        30_000,
        60_000,
        300_000,
        600_000,
        1_800_000,
        3_600_000,
        21_600_000,
        86_400_000,
    ]
    for unit in units:
        if raw <= unit:
            return unit
    return int(86_400_000 * math.ceil(raw / 86_400_000))


def render_png(
    series: Sequence[Series],
    redeliveries: tuple[list[int], dict[str, list[int]], int],
    path: Path,
    *,
    title: str,
) -> Path:
    """Three panels sharing the event-time axis: backlog, ack-hole ranges, redeliveries."""
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.dates as mdates
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(3, 1, figsize=(WIDTH_IN, HEIGHT_IN), dpi=DPI, sharex=True)
    try:
        fig.suptitle(title, fontsize=12)
        colors = plt.get_cmap("tab10")
        color_of = {s.name: colors(i % 10) for i, s in enumerate(series)}
        for ax, label, values in (
            (axes[0], "backlog (entries)", "backlog"),
            (axes[1], "ack-hole ranges", "holes"),
        ):
            for s in series:
                ax.step(
                    [_dt(t) for t in s.times],
                    getattr(s, values),
                    where="post",
                    marker="o",
                    markersize=3,
                    linewidth=1.4,
                    color=color_of[s.name],
                    label=s.name,
                )
            ax.set_ylabel(label)
            ax.grid(True, alpha=0.3)
            if not series:
                _empty(ax, "no cursor history in the warehouse")
        if series:
            axes[0].legend(loc="upper left", fontsize=7, ncol=2, frameon=False)

        starts, counts, width = redeliveries
        ax = axes[2]
        if counts:
            bottom = [0] * len(starts)
            bar_width = width / 86_400_000 * 0.9  # matplotlib dates are days
            for name, values in sorted(counts.items()):
                ax.bar(
                    [_dt(s + width // 2) for s in starts],
                    values,
                    width=bar_width,
                    bottom=bottom,
                    color=color_of.get(name, "0.6"),
                    label=name,
                )
                bottom = [b + v for b, v in zip(bottom, values, strict=True)]
            ax.legend(loc="upper left", fontsize=7, ncol=2, frameon=False)
        else:
            _empty(ax, "no redeliveries recorded")
        ax.set_ylabel(f"redeliveries per {_duration(width)}" if width else "redeliveries")
        ax.grid(True, alpha=0.3, axis="y")
        ax.set_xlabel("event time (UTC)")
        if series or counts:
            locator = mdates.AutoDateLocator(tz=UTC)
            ax.xaxis.set_major_locator(locator)
            ax.xaxis.set_major_formatter(mdates.ConciseDateFormatter(locator, tz=UTC))
        fig.savefig(path, dpi=DPI)
    finally:
        plt.close(fig)
    return path


def render_html(
    png: Path,
    series: Sequence[Series],
    *,
    title: str,
    facts: Mapping[str, str],
) -> str:
    """A self-contained page: the PNG inlined (base64), then the latest value of each series."""
    image = base64.b64encode(png.read_bytes()).decode("ascii")
    rows = "\n".join(
        "<tr><td>{}</td><td>{}</td><td class=n>{:,}</td><td class=n>{:,}</td><td class=n>{:,}</td>"
        "<td class=n>{:,}</td></tr>".format(
            html.escape(s.name),
            html.escape(_dt(s.times[-1]).strftime("%Y-%m-%d %H:%M:%S")) if s.times else "",
            s.backlog[-1] if s.backlog else 0,
            s.peak[0],
            s.holes[-1] if s.holes else 0,
            s.peak[1],
        )
        for s in series
    )
    fact_rows = "\n".join(
        f"<tr><th>{html.escape(k)}</th><td>{html.escape(v)}</td></tr>" for k, v in facts.items()
    )
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 2em; color: #222; }}
table {{ border-collapse: collapse; margin: 1em 0; }}
th, td {{ border: 1px solid #ccc; padding: 0.3em 0.6em; text-align: left; }}
td.n {{ text-align: right; font-variant-numeric: tabular-nums; }}
img {{ max-width: 100%; }}
</style></head>
<body>
<h1>{html.escape(title)}</h1>
<img src="data:image/png;base64,{image}" alt="backlog, ack holes and redeliveries over time">
<h2>Subscriptions drawn</h2>
<table>
<tr><th>subscription</th><th>last point (event time, UTC)</th><th>backlog</th><th>peak backlog</th>
<th>ack-hole ranges</th><th>peak ack-hole ranges</th></tr>
{rows}
</table>
<h2>Source</h2>
<table>
{fact_rows}
</table>
</body></html>
"""


def _dt(epoch_ms: int) -> datetime:
    return datetime.fromtimestamp(epoch_ms / 1000, UTC)


def _duration(ms: int) -> str:
    for unit, size in (("day", 86_400_000), ("hour", 3_600_000), ("minute", 60_000), ("second", 1_000)):
        if ms % size == 0 and ms >= size:
            n = ms // size
            return f"{n} {unit}{'s' if n != 1 else ''}" if n != 1 else unit
    return f"{ms} ms"


def _empty(ax: Any, text: str) -> None:
    ax.text(0.5, 0.5, text, transform=ax.transAxes, ha="center", va="center", color="0.5")


def spread(versions: Sequence[int], points: int) -> list[int]:
    """At most ``points`` of ``versions`` (ascending), evenly spaced, always the first and last."""
    if points <= 0 or not versions:
        return []
    if len(versions) <= points:
        return list(versions)
    if points == 1:
        return [versions[-1]]
    step = (len(versions) - 1) / (points - 1)
    return sorted({versions[round(i * step)] for i in range(points)})


# ---- Spark part -----------------------------------------------------------------------------
CURSOR_COLUMNS = (
    "topic",
    "partition",
    "subscription",
    "last_event_time",
    "msg_backlog",
    "non_contiguous_deleted_ranges",
)
REDELIVERY_COLUMNS = ("topic", "partition", "subscription", "ledger_id", "entry_id", "requested_at")


def read_history(
    spark: SparkSession, warehouse: str, name: str, columns: Sequence[str], points: int
) -> tuple[list[dict[str, Any]], list[int]]:
    """Rows of ``name`` at up to ``points`` versions (one Spark job), and the versions read.

    Versions whose files VACUUM deleted cannot be read; the oldest ones are dropped until the
    rest reads (VACUUM removes the oldest first).
    """
    from delta.tables import DeltaTable
    from pyspark.errors import PySparkException
    from pyspark.sql import functions as F

    from jobs.platform.tables import read_table, table_path

    path = table_path(warehouse, name)
    if not DeltaTable.isDeltaTable(spark, path):
        return [], []
    history = DeltaTable.forPath(spark, path).history().select("version", "operation").collect()
    # versions that can change rows; OPTIMIZE, VACUUM and the table's creation cannot
    versions = sorted(
        int(r["version"])
        for r in history
        if r["operation"] not in ("OPTIMIZE", "VACUUM START", "VACUUM END", "CREATE TABLE")
    )
    chosen = spread(versions, points)
    while chosen:
        frames: list[DataFrame] = []
        try:
            for version in chosen:
                frames.append(
                    read_table(spark, warehouse, name, as_of=version).select(
                        *columns, F.lit(version).alias("_version")
                    )
                )
            union = frames[0]
            for frame in frames[1:]:
                union = union.unionByName(frame)
            return [row.asDict() for row in union.collect()], chosen
        except PySparkException as exc:
            dropped = chosen[: max(1, len(chosen) // 4)]
            log.info(
                "%s: versions %s..%s cannot be read (%s); trying later ones",
                name,
                dropped[0],
                dropped[-1],
                str(exc).strip().splitlines()[0][:160],
            )
            chosen = chosen[len(dropped) :]
    return [], []


def run(args: argparse.Namespace) -> int:
    """``ackstate report``."""
    from delta.tables import DeltaTable

    from jobs.platform.session import get_spark
    from jobs.platform.tables import table_path

    spark = get_spark(args.config)
    warehouse = locations.resolve(args.warehouse)
    if not DeltaTable.isDeltaTable(spark, table_path(warehouse, "cursors")):
        raise ReportError(
            f"warehouse {warehouse} has no cursors table: run `ackstate init` and `ackstate ingest` "
            "with this --warehouse first"
        )
    selected = TopicFilter.parse(args.topic) if getattr(args, "topic", None) else None
    subscription = getattr(args, "subscription", None)
    points = max(1, int(getattr(args, "points", 60) or 60))
    top = max(1, int(getattr(args, "top", 8) or 8))
    started = time.perf_counter()
    cursor_rows, cursor_versions = read_history(spark, warehouse, "cursors", CURSOR_COLUMNS, points)
    series = build_series(cursor_rows, top=top, topic=selected, subscription=subscription)
    redelivery_rows, redelivery_versions = read_history(
        spark, warehouse, "redeliveries", REDELIVERY_COLUMNS, points
    )
    redeliveries = bucket_redeliveries(
        redelivery_rows, [s.name for s in series], topic=selected, subscription=subscription
    )

    out = locations.resolve(args.out)
    # drawn on local disk; a URI --out then gets both files copied through Hadoop's FileSystem
    with tempfile.TemporaryDirectory(prefix="ackstate-report-") as scratch:
        local = Path(scratch) if locations.is_uri(out) else Path(out)
        local.mkdir(parents=True, exist_ok=True)
        title = f"ackstate report: {warehouse}" + (f", {selected.name}" if selected else "")
        if subscription:
            title += f", subscription {subscription}"
        png = render_png(series, redeliveries, local / PNG_NAME, title=title)
        facts = {
            "warehouse": warehouse,
            "cursors versions read": _versions(cursor_versions),
            "redeliveries versions read": _versions(redelivery_versions),
            "subscriptions drawn": f"{len(series)} (top {top} by peak backlog, then ack holes)",
            "written": datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%S UTC"),
        }
        html = render_html(png, series, title=title, facts=facts)
        (local / HTML_NAME).write_text(html, encoding="utf-8")
        if locations.is_uri(out):
            for name in (PNG_NAME, HTML_NAME):
                locations.upload(local / name, locations.join(out, name))
    print(f"report: {locations.join(out, PNG_NAME)} and {locations.join(out, HTML_NAME)}")
    print(
        f"  {len(series)} subscription(s) over {len(cursor_versions)} cursors version(s), "
        f"{sum(sum(v) for v in redeliveries[1].values())} redelivery request(s), "
        f"in {time.perf_counter() - started:.1f} s"
    )
    return 0


def _versions(versions: Sequence[int]) -> str:
    if not versions:
        return "none"
    return f"{len(versions)} between {versions[0]} and {versions[-1]}"


if __name__ == "__main__":  # spark-submit jobs/read/report.py --warehouse ... --out ...
    import sys

    from jobs.cli import main

    sys.exit(main(["report", *sys.argv[1:]]))
