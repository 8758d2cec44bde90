"""What every job stands on: settings, the Spark session and its jars, table locations, the Delta
tables, checkpoints, retries, errors, logging and progress, and the local servers ``ackstate
setup`` caches (Pulsar, Kafka, S3A).

Never put this directory on ``sys.path`` (by running one of its files as a script): its
``platform`` name would hide the standard library's.
"""
