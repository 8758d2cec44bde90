"""Plays a race-making scenario on fresh brokers, round after round, and counts what differs.

The judge (``test_broker_judges.py``) plays each scenario once and must find no difference. Some
of the plugin's event order rests on reading races between broker threads from the outside
(``interceptor/.../ReplaysInFlight.java``); this tool measures how often that reading still
loses on a real broker. It plays one scenario of ``scenarios.py`` per round on a new standalone
broker (the judge's settings), ingests the plugin's files, and prints every field where
ackstate differs from the admin API::

    .venv/bin/python -m tests.pulsar.stress acks_racing_replays --rounds 5

It needs what the ``pulsar`` tests need (``ackstate setup --pulsar``). It is not a test: a
scenario that races on purpose cannot promise the same outcome twice.
"""

from __future__ import annotations

import argparse
import logging
import tempfile
from pathlib import Path

from jobs.platform.broker import StandaloneBroker
from jobs.platform.session import get_spark
from tests.conftest import TEST_SPARK_CONF
from tests.pulsar import scenarios
from tests.pulsar.judge import differences
from tests.pulsar.scenarios import Run, make_dedup_namespace
from tests.pulsar.test_broker_judges import BROKER_CONF, judge

log = logging.getLogger("ackstate.stress")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("scenario", help="a scenario function of tests/pulsar/scenarios.py")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    play = getattr(scenarios, args.scenario)
    spark = get_spark(app_name="ackstate-stress", master="local[2]", extra_conf=dict(TEST_SPARK_CONF))
    differing = 0
    for n in range(args.rounds):
        root = Path(tempfile.mkdtemp(prefix="ackstate-stress-"))
        sink, warehouse = root / "events", root / "warehouse"
        with StandaloneBroker(root / "broker", sink_dir=sink, conf=BROKER_CONF, quick_jit=True) as broker:
            make_dedup_namespace(broker)
            judged = judge(spark, Run(broker, prefix=f"r{n}"), (play,), sink, warehouse)
        found = [
            f"{moment} {name}{line}"
            for moment in ("connected", "closed")
            for name in judged.run.names()
            for line in differences(
                getattr(judged, moment).broker[name], getattr(judged, moment).ackstate[name]
            )
        ]
        differing += bool(found)
        log.info("round %d: %d difference(s) (files in %s)", n, len(found), root)
        for line in found:
            log.info("  %s", line)
    log.info("%d of %d round(s) differ", differing, args.rounds)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
