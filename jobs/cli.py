"""``ackstate``: the one command-line entry point (CONTRACT.md section 3).

This module only parses arguments and dispatches. Each subcommand is a function
``f(args) -> int | None`` named by module path in ``COMMANDS`` and imported when the command
runs, so ``ackstate --help`` starts no JVM and a command whose module is not part of this
build says so instead of failing at import. Before dispatch, ``args.config`` holds the merged
``AckstateConfig`` and ``args.warehouse`` the resolved warehouse (an absolute path or a URI,
``jobs.platform.locations``).
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable, Sequence
from importlib import metadata
from typing import Any, NamedTuple

from jobs.platform.config import load_config
from jobs.platform.errors import AckstateError
from jobs.platform.java import prefer_quick_jit
from jobs.platform.logs import configure_logging


class Command(NamedTuple):
    target: str
    """``module:function`` called with the parsed arguments."""
    help: str


COMMANDS: dict[str, Command] = {
    "setup": Command(
        "jobs.platform.setup:setup_command",
        "put the Delta Lake jars in the local cache (and the Pulsar broker and its plugin, Kafka, "
        "S3A with --pulsar, --kafka, --s3)",
    ),
    "demo": Command(
        "jobs.bench.demo:run", "generate a workload, ingest it and print stats: the main job, locally"
    ),
    "init": Command("jobs.platform.tables:init_command", "create the warehouse tables (idempotent)"),
    "ingest": Command("jobs.ingest.query:run", "the streaming job: apply events to the warehouse tables"),
    "bootstrap": Command(
        "jobs.ingest.bootstrap:run", "start from a running cluster's state, read from the Pulsar admin API"
    ),
    "compact": Command(
        "jobs.compact.compaction:run", "the scheduled batch job: compact the warehouse tables"
    ),
    "stats": Command("jobs.read.stats:stats_command", "JSON shaped like `pulsar-admin topics stats`"),
    "internal-stats": Command(
        "jobs.read.stats:internal_stats_command", "JSON shaped like `pulsar-admin topics stats-internal`"
    ),
    "generate": Command("jobs.bench.generate:run", "write a synthetic event log"),
    "bench": Command("jobs.bench.command:run", "run the benchmarks and print the figures"),
    "sql": Command("jobs.read.sql:run", "run a SQL query over the warehouse tables"),
    "report": Command(
        "jobs.read.report:run", "draw backlog, ack holes and redeliveries over time (PNG and HTML page)"
    ),
}


_EXACT_OPTIONS = frozenset({"bootstrap"})
"""Commands whose options must be typed whole: ``bootstrap --token SECRET`` would otherwise be
read as ``--token-file SECRET``, and the secret would end up in an error message."""

SHORT_LIVED = frozenset({"init", "bootstrap", "stats", "internal-stats", "sql", "report"})
"""Commands that start Spark for a few queries and exit."""

INTERPRETED_COMMANDS = frozenset({"init", "stats", "internal-stats"})
"""Short-lived commands whose few queries run Spark's expressions interpreted
(``INTERPRETED_QUERIES``).

Why: a quarter of the JVM samples of ``ackstate stats`` went to generating and compiling code
(Java Flight Recorder, 2026-12-02), for queries that each run once over Delta's log and a few
tables. Alternated three times on a quiet machine, interpreted against generated code: ``stats``
8.4-8.9 s against 10.1-10.4 s on an empty warehouse and 8.6-8.7 against 9.8-10.3 s on a
300,000-event demo warehouse; ``internal-stats`` 7.2 against 8.2-9.0 s and 7.4-7.7 against
8.1-8.7 s; ``init`` 5.5 against 5.8-6.7 s. ``sql`` gained 0.2 s on the demo and runs the user's
own queries, of any size, so it keeps generated code; so do ``bootstrap`` and ``report``, which
were not measured."""

INTERPRETED_QUERIES = {
    "spark.sql.codegen.factoryMode": "NO_CODEGEN",
    "spark.sql.codegen.wholeStage": "false",
}
"""The session settings of an ``INTERPRETED_COMMANDS`` command, unless ``[spark]`` names either
(then the user's choice stands for both). ``factoryMode`` is internal to Spark; the ingest's
small batches use it too (``jobs.ingest.batch.INTERPRETED``, which leaves whole-stage code on;
the two were measured together here, not apart)."""


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``ackstate`` with ``argv`` (default ``sys.argv[1:]``); return the exit status."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, or a usage error argparse already printed
        return _exit_code(exc.code)
    if args.command is None:
        parser.print_help(sys.stderr)
        return 2

    configure_logging(args.log_level)
    try:
        handler = _load(COMMANDS[args.command].target)
        if handler is None:
            print(f"ackstate {args.command}: not available in this build", file=sys.stderr)
            return 2
        args.config = load_config(args.conf)
        args.warehouse = args.config.warehouse(args.warehouse)
        if args.command in SHORT_LIVED:
            # a query that runs for seconds gains more from a JVM that starts fast (C1 only) than
            # from the optimising compiler (an ingest decides for itself: jobs.ingest.query)
            prefer_quick_jit(args.config.spark)
        if args.command in INTERPRETED_COMMANDS and not INTERPRETED_QUERIES.keys() & args.config.spark.keys():
            # compiling the code of queries that each run once costs more than it saves
            args.config.spark.update(INTERPRETED_QUERIES)
        return _exit_code(handler(args))
    except AckstateError as exc:
        print(f"ackstate: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("ackstate: interrupted", file=sys.stderr)
        return 130


def build_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--warehouse",
        metavar="PATH",
        help="Delta warehouse directory "
        "(default: $ACKSTATE_WAREHOUSE, else [ingest] warehouse, else ./warehouse)",
    )
    common.add_argument(
        "--conf", metavar="FILE", help="TOML settings merged over conf/ackstate.toml (see README)"
    )
    common.add_argument(
        "--log-level",
        default="INFO",
        choices=["DEBUG", "INFO", "WARNING", "ERROR"],
        help="level of ackstate's own log lines on stderr (default: INFO)",
    )

    parser = argparse.ArgumentParser(
        prog="ackstate",
        description="Apache Pulsar subscription acknowledgement state as Delta Lake tables.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", title="commands")
    parsers = {
        name: sub.add_parser(
            name,
            parents=[common],
            help=cmd.help,
            description=cmd.help,
            allow_abbrev=name not in _EXACT_OPTIONS,
        )
        for name, cmd in COMMANDS.items()
    }
    for name, add in _ARGUMENTS.items():
        add(parsers[name])
    return parser


def _setup_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--jars-dir",
        metavar="PATH",
        help="jar cache (default: $ACKSTATE_JARS_DIR, else ~/.cache/ackstate/jars)",
    )
    p.add_argument(
        "--resolver",
        choices=["auto", "maven", "ivy"],
        default="auto",
        help="how to fetch the jars: Maven if `mvn` is on PATH, else Spark's Ivy (default: auto)",
    )
    p.add_argument(
        "--force",
        action="store_true",
        help="resolve (and dump the class archive) again even if the cache is complete",
    )
    p.add_argument(
        "--pulsar",
        action="store_true",
        help="also resolve the Pulsar 4.0.7 broker and build the ackstate broker plugin (needs Maven)",
    )
    p.add_argument(
        "--kafka",
        action="store_true",
        help="also resolve Spark's Kafka source (ingest --format kafka) and a Kafka server (needs Maven)",
    )
    p.add_argument(
        "--s3",
        action="store_true",
        help="also resolve Hadoop's S3A connector, for s3a:// and s3:// locations (needs Maven)",
    )
    p.add_argument(
        "--verify",
        action="store_true",
        help="start a local Delta session from the cache even if nothing was resolved",
    )


def _demo_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--events", type=int, default=100_000, metavar="N", help="events to generate (default: 100000)"
    )
    p.add_argument("--out", metavar="PATH", help="where to write the event log (default: chosen by the demo)")


def _ingest_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--source",
        metavar="PATH",
        help="event input: a directory of JSON Lines files, a Delta table, or a Kafka topic",
    )
    p.add_argument(
        "--format",
        choices=["json", "delta", "kafka"],
        default="json",
        help="source format; with kafka, --source is the topic (default: json)",
    )
    p.add_argument(
        "--kafka-bootstrap-servers",
        metavar="HOST:PORT",
        help="Kafka servers for --format kafka (default: [kafka] bootstrap_servers)",
    )
    p.add_argument(
        "--trigger",
        choices=["available-now", "continuous"],
        help="process what is there and stop, or keep running (default: [ingest] trigger)",
    )
    p.add_argument(
        "--processing-time",
        metavar="INTERVAL",
        help='micro-batch interval for --trigger continuous, e.g. "5 seconds" '
        "(default: [ingest] processing_time)",
    )
    p.add_argument(
        "--checkpoint", metavar="PATH", help="streaming checkpoint directory (default: under the warehouse)"
    )
    p.add_argument(
        "--max-files-per-trigger",
        type=int,
        metavar="N",
        help="input files per micro-batch (default: [ingest] max_files_per_trigger)",
    )
    p.add_argument(
        "--implicit-consumers",
        action="store_true",
        default=None,
        help="a command from a consumer the state does not know attaches it instead of being "
        "refused as unknown_consumer: for a stream that starts after its consumers subscribed "
        "(default: [ingest] implicit_consumers)",
    )


def _bootstrap_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--admin-url",
        metavar="URL",
        help="the Pulsar admin REST API (webServiceUrl), e.g. http://broker:8080",
    )
    p.add_argument(
        "--topic",
        action="append",
        metavar="T",
        help="a topic or partition, as Pulsar names it; repeatable (default: every topic)",
    )
    p.add_argument(
        "--token-file",
        metavar="FILE",
        help="file holding the admin API token (default: $ACKSTATE_ADMIN_TOKEN; never on the command line)",
    )
    p.add_argument("--tls-ca-file", metavar="FILE", help="CA certificate(s) for an https admin URL")


def _stats_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--topic", metavar="T", help="one topic or partition, as Pulsar names it (default: all)")
    p.add_argument("--subscription", metavar="S", help="one subscription (default: all)")
    p.add_argument("--as-of", metavar="V", help="Delta table version or timestamp to read (default: latest)")


def _generate_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", metavar="PATH", default="./events", help="output directory (default: ./events)")
    p.add_argument(
        "--events", type=int, default=100_000, metavar="N", help="events to write (default: 100000)"
    )
    p.add_argument("--topics", type=int, default=4, metavar="N", help="topics (default: 4)")
    p.add_argument("--partitions", type=int, default=2, metavar="N", help="partitions per topic (default: 2)")
    p.add_argument(
        "--subscriptions", type=int, default=4, metavar="N", help="subscriptions per topic (default: 4)"
    )
    p.add_argument(
        "--malformed-rate",
        type=float,
        default=0.0,
        metavar="F",
        help="fraction of records written malformed, 0..1 (default: 0)",
    )
    p.add_argument("--seed", type=int, default=0, metavar="N", help="random seed (default: 0)")
    p.add_argument(
        "--files",
        type=int,
        default=8,
        metavar="N",
        help="JSON Lines files to split the log into (default: 8)",
    )
    p.add_argument("--overwrite", action="store_true", help="remove an earlier run's files in --out first")


def _bench_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--engine", action="store_true", help="engine apply, ack-heavy stream, one core")
    p.add_argument("--ingest", action="store_true", help="end-to-end ingest against a Spark pass-through")
    p.add_argument(
        "--latency",
        action="store_true",
        help="a warm micro-batch of 1,000 mixed events, trigger to last commit, with its phases",
    )
    p.add_argument(
        "--startup",
        action="store_true",
        help="a command's session start and first Delta query, with the driver's class archive and without",
    )
    p.add_argument(
        "--subscriptions",
        action="store_true",
        help="per-subscription work over 100,000 subscriptions (Failover assignment: engine and Spark UDF)",
    )
    p.add_argument("--dedup", action="store_true", help="producer deduplication")
    p.add_argument(
        "--interceptor",
        action="store_true",
        help="the broker plugin's cost: local brokers with and without it (needs `ackstate setup --pulsar`)",
    )
    p.add_argument(
        "--runs",
        type=int,
        default=5,
        metavar="N",
        help="runs per figure; the median is reported (default: 5)",
    )
    p.add_argument("--quick", action="store_true", help="small sizes, for a smoke test")


def _sql_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "query",
        nargs="?",
        help="SQL over the warehouse tables, which are registered by their names "
        "(default: statements from stdin, or an interactive shell on a terminal)",
    )
    p.add_argument("--as-of", metavar="V", help="Delta table version or timestamp to read (default: latest)")
    p.add_argument(
        "--format",
        choices=["table", "json", "csv"],
        default="table",
        help="table (aligned text), json (one object per line) or csv (default: table)",
    )
    p.add_argument(
        "--limit", type=int, default=1000, metavar="N", help="rows shown by --format table (default: 1000)"
    )


def _compact_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.add_argument("--tables", metavar="T1,T2", help="only these tables (default: every table)")
    p.add_argument("--no-optimize", action="store_true", help="skip OPTIMIZE")
    p.add_argument("--no-vacuum", action="store_true", help="skip VACUUM")
    p.add_argument("--no-checkpoint", action="store_true", help="skip writing Delta checkpoints")
    p.add_argument(
        "--vacuum-retention-hours",
        type=float,
        metavar="H",
        help="VACUUM deletes files unused for longer than H hours (default: [compact], 168)",
    )
    p.add_argument(
        "--allow-short-retention",
        action="store_true",
        help="allow a VACUUM retention below Delta's 168-hour safety minimum",
    )
    p.add_argument(
        "--retention",
        action="append",
        metavar="TABLE=DAYS",
        help="history retention of one table in days, 0 = keep forever (default: [compact])",
    )
    p.add_argument(
        "--trim-ledgers-before",
        action="append",
        metavar="TOPIC[:PARTITION]=LEDGER_ID",
        help="the partition's retention deleted its ledgers below LEDGER_ID: trim them here too "
        "(safe next to a running ingest, which applies the trim to the partitions it writes)",
    )
    p.add_argument(
        "--trim-wait",
        type=float,
        metavar="SECONDS",
        help="how long a ledger trim waits for the ingest batches running when it was requested "
        "(default: [compact] trim_wait_seconds, 600)",
    )


def _report_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--out",
        metavar="DIR",
        default="./ackstate-report",
        help="output directory (default: ./ackstate-report)",
    )
    p.add_argument("--topic", metavar="T", help="one topic or partition, as Pulsar names it (default: all)")
    p.add_argument("--subscription", metavar="S", help="one subscription (default: all)")
    p.add_argument("--top", type=int, default=8, metavar="N", help="subscriptions drawn (default: 8)")
    p.add_argument(
        "--points",
        type=int,
        default=60,
        metavar="N",
        help="table versions read from the Delta history (default: 60, spread evenly)",
    )


_ARGUMENTS: dict[str, Callable[[argparse.ArgumentParser], None]] = {
    "setup": _setup_args,
    "demo": _demo_args,
    "ingest": _ingest_args,
    "bootstrap": _bootstrap_args,
    "stats": _stats_args,
    "internal-stats": _stats_args,
    "generate": _generate_args,
    "bench": _bench_args,
    "sql": _sql_args,
    "compact": _compact_args,
    "report": _report_args,
}


def _load(target: str) -> Callable[[argparse.Namespace], Any] | None:
    """Import ``module:function``; None when that module (not one it imports) does not exist."""
    module_name, function = target.split(":")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name == module_name:
            return None
        raise
    return getattr(module, function, None)


def _exit_code(code: Any) -> int:
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)  # SystemExit("message") convention
    return 1


def _version() -> str:
    try:
        return metadata.version("ackstate")
    except metadata.PackageNotFoundError:
        return "0+unknown"


if __name__ == "__main__":
    sys.exit(main())
