"""``ackstate report`` renders from a warehouse the real ingest built (plus redeliveries)."""

from __future__ import annotations

import base64
import re

import pytest
from delta.tables import DeltaTable

from jobs.cli import main
from jobs.platform.tables import read_table, table_path
from tests.jobs.compact.test_compact_options import png_size
from tests.jobs.warehouse import append_rows, copy, demo_warehouse

pytestmark = pytest.mark.spark  # needs the run's Spark session (JVM)

TOPIC = "persistent://acme/prod/orders-0"


def test_report_renders_from_a_demo_warehouse(spark, tmp_path, tmp_path_factory, capsys):
    warehouse = copy(demo_warehouse(spark, tmp_path_factory.getbasetemp()), tmp_path / "warehouse")
    # the three subscriptions with the largest backlog (then ack holes) at any version
    peaks: dict[str, tuple[int, int]] = {}
    for version in [
        h.version for h in DeltaTable.forPath(spark, table_path(warehouse, "cursors")).history().collect()
    ]:
        for c in read_table(spark, warehouse, "cursors", as_of=version).collect():
            name = c.topic if c.partition < 0 else f"{c.topic}-partition-{c.partition}"
            key = f"{name} {c.subscription}"
            peak = peaks.get(key, (0, 0))
            peaks[key] = (max(peak[0], c.msg_backlog), max(peak[1], c.non_contiguous_deleted_ranges))
    top3 = sorted(peaks, key=lambda k: (peaks[k], k), reverse=True)[:3]
    base = {"topic": TOPIC, "partition": 0, "subscription": "analytics", "ledger_id": 11, "reason": "NACK"}
    # two commits, two versions: the second updates entry 1 (its count grows) and adds entry 3
    append_rows(
        spark,
        warehouse,
        "redeliveries",
        [
            {**base, "entry_id": 1, "requested_at": 1_700_000_000_100, "redelivery_count": 1},
            {**base, "entry_id": 2, "requested_at": 1_700_000_000_200, "redelivery_count": 1},
        ],
    )
    append_rows(
        spark,
        warehouse,
        "redeliveries",
        [{**base, "entry_id": 3, "requested_at": 1_700_000_001_300, "redelivery_count": 1}],
    )
    out = tmp_path / "report"

    assert main(["report", "--warehouse", str(warehouse), "--out", str(out), "--top", "3"]) == 0
    printed = capsys.readouterr().out
    assert f"report: {out / 'report.png'} and {out / 'report.html'}" in printed
    assert re.search(r"3 subscription\(s\) over \d+ cursors version\(s\), 3 redelivery request\(s\)", printed)

    png = out / "report.png"
    assert png_size(png) == (1200, 900)
    assert png.stat().st_size > 20_000  # three drawn panels, not an empty canvas
    page = (out / "report.html").read_text()
    embedded = re.search(r'src="data:image/png;base64,([A-Za-z0-9+/=]+)"', page)
    assert embedded is not None and base64.b64decode(embedded[1]) == png.read_bytes()
    drawn = re.findall(r"<tr><td>([^<]+)</td>", page)
    assert drawn == top3


def test_report_of_a_fresh_warehouse_draws_empty_panels(spark, tmp_path, capsys):
    assert main(["init", "--warehouse", str(tmp_path / "warehouse")]) == 0
    out = tmp_path / "report"
    assert main(["report", "--warehouse", str(tmp_path / "warehouse"), "--out", str(out)]) == 0
    assert "0 subscription(s) over 0 cursors version(s), 0 redelivery request(s)" in capsys.readouterr().out
    assert png_size(out / "report.png") == (1200, 900)
