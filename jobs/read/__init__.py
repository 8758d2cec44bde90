"""What users read: ``stats`` and ``internal-stats`` (pulsar-admin's JSON), ``sql`` and ``report``."""
