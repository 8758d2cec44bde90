"""``spark-submit jobs/compact/__main__.py --warehouse ...`` (or ``python -m jobs.compact``):
``ackstate compact`` as a file that spark-submit can run."""

import sys

from jobs.cli import main

sys.exit(main(["compact", *sys.argv[1:]]))
