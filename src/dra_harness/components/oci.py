"""Write OCI image-layout tarballs from plain files, for ``ctr images import``.

Why our own writer: the real nodes must run without a registry and without Docker,
and their images are tiny (a static pause binary, Debian's static busybox, the
Go-built driver plugin). An image is one uncompressed layer, a config and a
manifest, laid out as the OCI image-layout spec says, with the reference name in
both the OCI and containerd annotations so that the import tags it as given.
Everything is deterministic (fixed mtimes, sorted entries), so the same inputs give
the same digests and re-imports are no-ops.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import tarfile
from dataclasses import dataclass, field
from pathlib import Path

MEDIA_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
MEDIA_CONFIG = "application/vnd.oci.image.config.v1+json"
MEDIA_LAYER = "application/vnd.oci.image.layer.v1.tar"
MEDIA_INDEX = "application/vnd.oci.image.index.v1+json"


@dataclass(frozen=True)
class File:
    """One layer entry: file content, or a symlink target when ``link`` is set."""

    path: str
    data: bytes = b""
    mode: int = 0o755
    link: str = ""


@dataclass
class Image:
    name: str  # full reference, e.g. registry.k8s.io/pause:3.10
    files: list[File]
    entrypoint: list[str]
    cmd: list[str] = field(default_factory=list)
    env: list[str] = field(default_factory=lambda: ["PATH=/bin:/usr/bin:/usr/local/bin"])


def _digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def layer_tar(files: list[File]) -> bytes:
    """An uncompressed, reproducible tar of ``files`` with their parent directories."""
    buf = io.BytesIO()
    dirs: set[str] = set()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for f in sorted(files, key=lambda f: f.path):
            parts = f.path.strip("/").split("/")
            for i in range(1, len(parts)):
                d = "/".join(parts[:i])
                if d not in dirs:
                    dirs.add(d)
                    info = tarfile.TarInfo(d)
                    info.type, info.mode = tarfile.DIRTYPE, 0o755
                    tar.addfile(info)
            info = tarfile.TarInfo("/".join(parts))
            info.mode = f.mode
            if f.link:
                info.type, info.linkname = tarfile.SYMTYPE, f.link
                tar.addfile(info)
            else:
                info.size = len(f.data)
                tar.addfile(info, io.BytesIO(f.data))
    return buf.getvalue()


def write_layout(image: Image, target: Path) -> Path:
    """Write ``image`` as an OCI image-layout tarball at ``target`` (atomically)."""
    layer = layer_tar(image.files)
    config = json.dumps({
        "architecture": "amd64",
        "os": "linux",
        "config": {"Entrypoint": image.entrypoint, "Cmd": image.cmd or None, "Env": image.env, "WorkingDir": "/"},
        "rootfs": {"type": "layers", "diff_ids": [_digest(layer)]},
        "history": [{"created_by": "dra-harness"}],
    }, sort_keys=True).encode()
    manifest = json.dumps({
        "schemaVersion": 2,
        "mediaType": MEDIA_MANIFEST,
        "config": {"mediaType": MEDIA_CONFIG, "digest": _digest(config), "size": len(config)},
        "layers": [{"mediaType": MEDIA_LAYER, "digest": _digest(layer), "size": len(layer)}],
    }, sort_keys=True).encode()
    tag = image.name.rsplit(":", 1)[1] if ":" in image.name.rsplit("/", 1)[-1] else "latest"
    index = json.dumps({
        "schemaVersion": 2,
        "mediaType": MEDIA_INDEX,
        "manifests": [{
            "mediaType": MEDIA_MANIFEST,
            "digest": _digest(manifest),
            "size": len(manifest),
            "platform": {"architecture": "amd64", "os": "linux"},
            "annotations": {"io.containerd.image.name": image.name, "org.opencontainers.image.ref.name": tag},
        }],
    }, sort_keys=True).encode()
    entries = {"oci-layout": b'{"imageLayoutVersion":"1.0.0"}', "index.json": index}
    for blob in (layer, config, manifest):
        entries[f"blobs/sha256/{_digest(blob)[7:]}"] = blob
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f"{target.name}.{os.getpid()}.tmp")  # two test workers may write the same image at once
    with tarfile.open(tmp, "w", format=tarfile.PAX_FORMAT) as tar:
        for d in ("blobs", "blobs/sha256"):
            info = tarfile.TarInfo(d)
            info.type, info.mode = tarfile.DIRTYPE, 0o755
            tar.addfile(info)
        for name, data in entries.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o644
            tar.addfile(info, io.BytesIO(data))
    tmp.replace(target)
    return target
