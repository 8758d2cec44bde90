"""ackstate's outer layer: the `ackstate` CLI, the Spark session factory and the spark-submit jobs."""
