"""``ackstate compact``: the scheduled batch job that compacts the warehouse and trims ledgers.

``python -m jobs.compact`` (or ``spark-submit jobs/compact/__main__.py``) runs it.
"""
