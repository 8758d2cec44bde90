"""An S3 API on 127.0.0.1: moto's server mode, a real HTTP server speaking the S3 protocol.

It keeps its objects in memory and accepts any credentials; Hadoop's S3A connector reaches it
with path-style requests and the settings ``hadoop_settings`` gives. It is stopped by its
process id.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jobs.platform.processes import free_port, stop_process

ACCESS_KEY = SECRET_KEY = "ackstate-test"
REGION = "us-east-1"


@dataclass
class S3Server:
    workdir: Path
    port: int = field(default_factory=free_port)
    process: subprocess.Popen[bytes] | None = None

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def hadoop_settings(self) -> dict[str, str]:
        """The S3A settings (without ``spark.hadoop.``) that point Spark at this server."""
        return {
            "fs.s3a.endpoint": self.endpoint,
            "fs.s3a.endpoint.region": REGION,
            "fs.s3a.path.style.access": "true",
            "fs.s3a.connection.ssl.enabled": "false",
            "fs.s3a.access.key": ACCESS_KEY,
            "fs.s3a.secret.key": SECRET_KEY,
            "fs.s3a.aws.credentials.provider": "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider",
        }

    def start(self, timeout: float = 60.0) -> None:
        with (self.workdir / "moto.log").open("ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)],
                cwd=self.workdir, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            )  # fmt: skip
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"moto server exited; see {self.workdir / 'moto.log'}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                    return
            except OSError:
                time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"moto server did not listen on {self.port} within {timeout:.0f} s")

    def create_bucket(self, bucket: str) -> None:
        request = urllib.request.Request(f"{self.endpoint}/{bucket}", method="PUT")
        with urllib.request.urlopen(request, timeout=30):
            pass

    def client(self) -> Any:
        """A boto3 client, to put and list objects independently of ackstate and Spark."""
        import boto3

        return boto3.client(
            "s3", endpoint_url=self.endpoint, region_name=REGION,
            aws_access_key_id=ACCESS_KEY, aws_secret_access_key=SECRET_KEY,
        )  # fmt: skip

    def download(self, uri: str, into: Path) -> Path:
        """Every object under ``uri`` (``s3a://<bucket>/<prefix>``) as files under ``into``, in
        the same layout: what the server holds, read with the S3 API and no Spark, so that a
        warehouse stored here can be compared from its files (``tests.jobs.warehouse.snapshot``)
        as a local one is."""
        bucket, _, prefix = uri.removeprefix("s3a://").partition("/")
        prefix = prefix.rstrip("/") + "/"
        client = self.client()
        for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
            for entry in page.get("Contents", []):
                if entry["Key"].endswith("/"):
                    continue  # a directory's marker: the files under it make the directory
                target = into / entry["Key"][len(prefix) :]
                target.parent.mkdir(parents=True, exist_ok=True)
                client.download_file(bucket, entry["Key"], str(target))
        return into

    def stop(self) -> None:
        if self.process is not None:
            stop_process(self.process, 30, "moto server")
            self.process = None

    def __enter__(self) -> S3Server:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
