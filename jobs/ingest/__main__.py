"""``spark-submit jobs/ingest/__main__.py --source ... --warehouse ...`` (or ``python -m jobs.ingest``):
``ackstate ingest`` as a file that spark-submit can run."""

import sys

from jobs.cli import main

sys.exit(main(["ingest", *sys.argv[1:]]))
