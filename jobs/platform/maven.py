"""Maven for ackstate's jar cache: a settings file that sends every repository to Maven Central,
and cache entries filled in a scratch directory and renamed into place with a manifest last.

Pulsar's POMs name repositories that cannot be reached from many build machines; the settings
file (``conf/maven-central-settings.xml``, or ``$ACKSTATE_MAVEN_SETTINGS``) mirrors them all to
Central. An entry is complete only when its manifest lists files that are all there, so an
interrupted resolution leaves nothing that looks usable.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

from jobs.platform.config import conf_dir
from jobs.platform.errors import PulsarSetupError

MANIFEST = "ackstate-jars.json"


SETTINGS_ENV = "ACKSTATE_MAVEN_SETTINGS"


def maven_settings() -> Path:
    """``$ACKSTATE_MAVEN_SETTINGS``, else conf/maven-central-settings.xml (every repository → Central)."""
    return Path(os.environ.get(SETTINGS_ENV) or conf_dir() / "maven-central-settings.xml")


def cached_files(directory: Path, source: str | None = None) -> list[Path] | None:
    """The files a cache entry's manifest lists, if all are there (and built from ``source``)."""
    try:
        manifest = json.loads((directory / MANIFEST).read_text())
        names = manifest["files"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if source is not None and manifest.get("source") != source:
        return None
    files = [directory / n for n in names]
    return files if files and all(f.is_file() for f in files) else None


def mvn() -> str:
    mvn = shutil.which("mvn")
    if mvn is None:
        raise PulsarSetupError("`mvn` is not on PATH: install Maven to resolve Pulsar and build the plugin")
    return mvn


def run_maven(args: list[str], log_file: Path) -> None:
    cmd = [mvn(), "-B", "-Dstyle.color=never", "-s", str(maven_settings()), *args]
    with log_file.open("w") as fh:
        fh.write(f"$ {' '.join(cmd)}\n")
        fh.flush()
        proc = subprocess.run(cmd, stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, check=False)
    if proc.returncode != 0:
        raise PulsarSetupError(f"Maven failed (exit {proc.returncode}); its output is in {log_file}")


def install_entry(scratch: Path, final: Path, files: list[str], source: str | None = None) -> None:
    manifest = {"files": sorted(files), "source": source}
    (scratch / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")
    if final.exists():
        shutil.rmtree(final)
    scratch.rename(final)


def resolve_pom(pom: Path, directory: Path, keep: Callable[[Path], bool] | None = None) -> list[Path]:
    """The runtime dependencies of ``pom``, copied by Maven into the cache entry ``directory``.

    Built in a scratch directory and renamed into place with its manifest, so an interrupted
    resolution leaves no half-filled entry; ``keep`` chooses among the copied jars.
    """
    root = directory.parent
    root.mkdir(parents=True, exist_ok=True)
    scratch = root / f".{directory.name}.partial"
    shutil.rmtree(scratch, ignore_errors=True)
    scratch.mkdir()
    run_maven(
        [
            "-q",
            "-f",
            str(pom),
            "dependency:copy-dependencies",
            "-DincludeScope=runtime",
            f"-DoutputDirectory={scratch}",
        ],
        root / f"{directory.name}.log",
    )
    for jar in scratch.glob("*.jar"):
        if keep is not None and not keep(jar):
            jar.unlink()
    install_entry(scratch, directory, [p.name for p in scratch.glob("*.jar")])
    return cached_files(directory) or []
