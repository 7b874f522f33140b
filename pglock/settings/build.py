"""What this pglock is: its version and, for an artifact of scripts/package, how it was built.

scripts/package writes BUILD.json next to this module in the artifacts it makes (the
single file and the Debian package): the artifact's kind and the commit it was built
from. A checkout or a pip install has no such file.
"""

from __future__ import annotations

import json
import platform
from pathlib import Path

from pglock import __version__

BUILD_FILE = Path(__file__).with_name("BUILD.json")


def built() -> dict[str, str]:
    """The build record of an artifact ({"kind": ..., "commit": ...}), or {} for none."""
    try:
        record = json.loads(BUILD_FILE.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    if not isinstance(record, dict):
        return {}
    return {str(key): str(value) for key, value in record.items()}


def version_line() -> str:
    """`pglock --version`: the version and, for an artifact, its kind, Python and commit."""
    record = built()
    if not record:
        return f"pglock {__version__}"
    kind = record.get("kind", "artifact")
    commit = record.get("commit", "unknown")
    return f"pglock {__version__} ({kind}, Python {platform.python_version()}, commit {commit})"
