"""Product configuration shipped inside the package: driver profiles, the example driver's
manifests and kind configs, KWOK stages, the feature-gate table and the Go wrapper modules
the components are built from.

Why package data: a wheel installed anywhere must find them, so nothing is looked up
relative to a checkout; :func:`path` goes through :mod:`importlib.resources`. The root of
a checkout links ``kind/`` here for people who read or apply those files by hand.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path


def path(*parts: str) -> Path:
    """A shipped file or directory. pip installs the package as files, never zipped, so it is a real path."""
    return Path(str(resources.files(__name__).joinpath(*parts)))
