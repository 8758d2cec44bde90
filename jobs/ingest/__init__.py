"""``ackstate ingest``: the streaming job that applies broker events to the warehouse tables.

``query`` starts the Structured Streaming query; ``batch`` is its ``foreachBatch`` (validate,
read state, apply in the Arrow UDF, write); ``projections`` turns the UDF's rows into table rows;
``recovery`` finds what a crashed run of a batch had read; ``producers`` writes the producer
tables; ``validate`` splits records into events and rejects; ``bootstrap`` starts from a
running cluster's state. ``python -m jobs.ingest`` (or ``spark-submit jobs/ingest/__main__.py``)
runs the job.
"""
