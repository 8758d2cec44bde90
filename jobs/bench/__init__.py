"""``ackstate bench`` and what it needs: the figures, one module per bench, the workload
generator (``ackstate generate``) and ``ackstate demo``."""
