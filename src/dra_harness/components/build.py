"""Build component binaries into a cache keyed by (component, version, Go version).

A cold build of the Kubernetes control plane takes many minutes on two cores, so each
result is kept under ``$DRA_HARNESS_CACHE`` (default ``~/.cache/dra-harness``) and
reused while the component version and the Go toolchain stay the same. Binaries are
written to a temporary directory and renamed into place, so an interrupted build never
leaves a half-written binary that looks cached. Progress is the count of packages
``go build -v`` reports against ``go list -deps``: bars on a terminal, plain lines elsewhere
(:mod:`dra_harness.heartbeat`).
"""

from __future__ import annotations

import fcntl
import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from dra_harness import heartbeat
from dra_harness.components.catalog import Component
from dra_harness.components.gomod import GO_ENV, go, toolchain_env
from dra_harness.errors import BuildError


def cache_root() -> Path:
    return Path(os.environ.get("DRA_HARNESS_CACHE") or Path.home() / ".cache" / "dra-harness")


def checkout_root() -> Path | None:
    """The source checkout this package runs from (an editable install), or None for an installed wheel."""
    here = Path(__file__).resolve()
    for parent in here.parents:
        if (parent / "pyproject.toml").is_file() and (parent / "src" / "dra_harness").is_dir():
            return parent
    return None


def go_version(component: Component | None = None) -> str:
    """The Go that builds ``component`` (its own toolchain where it names one; else the machine's)."""
    if component is not None and component.toolchain:
        return component.toolchain
    try:
        return go("env", "GOVERSION").strip()
    except FileNotFoundError as e:
        raise BuildError("Go is not installed: Go >= 1.26 is needed to build the cluster components") from e


@dataclass(frozen=True)
class Built:
    component: Component
    directory: Path
    seconds: float
    cached: bool

    def binary(self, name: str) -> Path:
        return self.directory / name


def binary_dir(component: Component, gover: str | None = None) -> Path:
    return cache_root() / "bin" / component.name / f"v{component.version}" / (gover or go_version(component))


def is_cached(component: Component, gover: str | None = None) -> bool:
    d = binary_dir(component, gover)
    return all((d / b).is_file() for b in component.binaries)


@contextmanager
def lock(path: Path) -> Iterator[None]:
    """An exclusive flock on ``path`` for the block (builds, and the kind engine's state)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def build(component: Component, progress: Progress | None = None, module_dir: Path | None = None) -> Built:
    """Build every binary of ``component`` unless the cache already has them.

    ``module_dir`` overrides the wrapper module (``data/components/<name>-v<version>``).
    """
    gover = go_version(component)
    target = binary_dir(component, gover)
    with lock(cache_root() / "locks" / f"{component.dirname}.lock"):
        if is_cached(component, gover):
            return Built(component, target, 0.0, cached=True)
        started = time.monotonic()
        _build(component, target, progress, module_dir or component.module_dir())
        return Built(component, target, time.monotonic() - started, cached=False)


def _build(component: Component, target: Path, progress: Progress | None, module_dir: Path) -> None:
    if not (module_dir / "go.mod").exists():
        raise BuildError(f"{component.dirname}: no wrapper module at {module_dir}")
    packages = list(component.binaries.values())
    log_path = cache_root() / "logs" / f"{component.dirname}.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, **GO_ENV, "GOFLAGS": "-mod=readonly", **toolchain_env(component)}
    if component.cgo:
        # go-nvml leaves NVML's symbols to be found at run time (dlopen), as NVIDIA's Makefile links it.
        env |= {"CGO_ENABLED": "1", "CGO_LDFLAGS_ALLOW": "-Wl,--unresolved-symbols=ignore-in-object-files"}

    # The task shows from the start: on a cold module cache `go list` downloads every module first.
    task = progress.add_task(component.dirname, total=None) if progress else None
    step = f"{component.dirname}: resolve packages"
    listed = run_logged(["go", "list", "-deps", *packages], module_dir, env, log_path, step)
    total = len(listed.split())
    if progress and task is not None:
        progress.update(task, total=total)
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".building-", dir=target.parent))
    try:
        ldflags = "-s -w " + " ".join(f"-X {x}" for x in component.version_x)
        argv = ["go", "build", "-v", "-trimpath", "-ldflags", ldflags, "-o", str(staging) + "/", *packages]
        step = f"{component.dirname}: go build"
        with open(log_path, "a") as log:
            log.write(f"$ {' '.join(argv)}\n")
            log.flush()
            proc = subprocess.Popen(
                argv, cwd=module_dir, env=env, stdout=log, stderr=subprocess.PIPE, text=True
            )
            assert proc.stderr is not None
            for line in proc.stderr:
                log.write(line)
                if progress and task is not None:
                    progress.advance(task)
            code = proc.wait()
        if code != 0:
            raise BuildError(f"{step} failed (exit {code}); log {log_path}:\n{_tail(log_path)}")
        for name, pkg in component.binaries.items():
            produced = staging / _default_binary_name(pkg)
            if produced.is_file() and produced.name != name:
                produced.rename(staging / name)
            if not (staging / name).is_file():
                raise BuildError(f"{step} produced no {name}; log {log_path}:\n{_tail(log_path)}")
        if target.exists():
            shutil.rmtree(target)
        staging.rename(target)
        if progress and task is not None:
            progress.update(task, completed=total)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _default_binary_name(package: str) -> str:
    """The name ``go build -o dir/`` gives a main package: its last path element,
    or the one before a major-version suffix (``.../server/v3`` -> ``server``)."""
    parts = package.split("/")
    if len(parts) > 1 and re.fullmatch(r"v\d+", parts[-1]):
        return parts[-2]
    return parts[-1]


def run_logged(argv: list[str], cwd: Path, env: dict[str, str], log_path: Path, step: str) -> str:
    """``argv`` run in ``cwd``, its output appended to ``log_path``; a failure names ``step`` and the log's tail."""
    with open(log_path, "a") as log:
        log.write(f"$ {' '.join(argv)}\n")
        proc = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True)
        log.write(proc.stdout + proc.stderr)
    if proc.returncode != 0:
        raise BuildError(f"{step} failed (exit {proc.returncode}); log {log_path}:\n{_tail(log_path)}")
    return proc.stdout


def _tail(path: Path, lines: int = 25) -> str:
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


def progress_bar() -> Progress:
    return Progress(
        TextColumn("[bold]building[/] {task.description}"),
        BarColumn(),
        MofNCompleteColumn(),  # "0/?" while the packages are being resolved
        TextColumn("packages"),
        TimeElapsedColumn(),
        transient=False,
    )


def build_all(components: list[Component], quiet: bool = False) -> dict[str, Built]:
    """Build what is missing, with one progress bar per component being built (plain lines without a terminal)."""
    missing = [c for c in components if not is_cached(c)]
    results: dict[str, Built] = {}
    if missing and not quiet:
        with progress_bar() as progress, heartbeat.follow(progress, "building", "packages"):
            for c in components:
                results[c.dirname] = build(c, progress)
    else:
        for c in components:
            results[c.dirname] = build(c)
    return results
