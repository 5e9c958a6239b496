"""kind's base image, built here: Debian's packages, kind's own files, containerd 2.4 and crictl we build.

Why not ``kindest/base``: our machines reach no container registry. kind's base image
is a Debian root file system with systemd, the packages its Dockerfile lists, the files
under ``images/base/files`` of kind's Go module (entrypoint, containerd config, systemd
units), and containerd, runc, crictl and CNI plugins. We make the same thing from what
we can reach: ``debootstrap`` from Debian's mirror, kind's files from its module,
containerd and crictl from theirs. runc and the CNI plugins are Debian's (the embedded
cluster's real nodes run the same ones). What we add, and why, is in
``data/kind/node-image/``: an entrypoint step for hosts without CAP_SYS_RESOURCE, the
pod network (kindnetd's source is not served here) and a no-provisioner StorageClass.

The image is tagged by a digest of its inputs, so a changed input builds a new one and
an unchanged one is reused (a cold build takes a few minutes, most of it debootstrap).
Building needs root (debootstrap, chroot); using the image does not.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path

from dra_harness import data
from dra_harness.components import build as builder
from dra_harness.components import catalog, prereqs
from dra_harness.components.gomod import module_source
from dra_harness.providers.kind.tools import KindError, image_present, run

SUITE = "bookworm"
MIRROR = "http://deb.debian.org/debian"
#: kind's base image packages (its images/base/Dockerfile), plus Debian's runc and CNI plugins.
PACKAGES = (
    "systemd", "conntrack", "iptables", "nftables", "iproute2", "ethtool", "util-linux", "mount", "kmod",
    "libseccomp2", "pigz", "fuse-overlayfs", "nfs-common", "open-iscsi", "e2fsprogs",
    "bash", "ca-certificates", "curl", "jq", "procps",
    "runc", "containernetworking-plugins",
)
REPOSITORY = "dra-harness.local/kind-base"
#: Bump for a change the inputs would not show (the assembly code itself is an input).
FORMAT = 1
ENTRYPOINT = ["/usr/local/bin/dra-harness-entrypoint", "/usr/local/bin/entrypoint", "/sbin/init"]
OUR_FILES = data.path("kind", "node-image")

# kind's Dockerfile, after its COPY steps: trim systemd to what a node runs, enable the node's units.
_SETUP = """set -e
find /lib/systemd/system/sysinit.target.wants/ -name systemd-tmpfiles-setup.service -delete
rm -f /lib/systemd/system/multi-user.target.wants/* /etc/systemd/system/*.wants/* \
      /lib/systemd/system/local-fs.target.wants/* /lib/systemd/system/sockets.target.wants/*udev* \
      /lib/systemd/system/sockets.target.wants/*initctl* /lib/systemd/system/basic.target.wants/*
echo ReadKMsg=no >> /etc/systemd/journald.conf
ln -sf /usr/lib/systemd/systemd /sbin/init
systemctl enable kubelet.service containerd.service undo-mount-hacks.service dra-harness-pod-network.service
systemctl mask systemd-binfmt.service
mkdir -p /etc/kubernetes/manifests /opt/cni
ln -sfn /usr/lib/cni /opt/cni/bin
rm -rf /var/cache/apt/archives/*.deb /var/lib/apt/lists/*
"""


def source_digest(*parts: str | Callable[..., object]) -> str:
    """The code that shapes an image is one of its inputs: a change to it rebuilds, a comment elsewhere does not."""
    h = hashlib.sha256()
    for part in parts:
        h.update((part if isinstance(part, str) else inspect.getsource(part)).encode())
    return h.hexdigest()


def _tree_digest(root: Path) -> str:
    h = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        h.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()


def inputs() -> dict[str, object]:
    return {
        "format": FORMAT, "suite": SUITE, "packages": PACKAGES, "kind": catalog.KIND_VERSION,
        "containerd": catalog.CONTAINERD_VERSION, "cri-tools": catalog.CRI_TOOLS_VERSION,
        "go": builder.go_version(), "ours": _tree_digest(OUR_FILES),
        "builder": source_digest(_SETUP, _assemble, _cri_base_spec, _import),
    }


def tag() -> str:
    digest = hashlib.sha256(json.dumps(inputs(), sort_keys=True).encode()).hexdigest()
    return f"{REPOSITORY}:{digest[:16]}"


def ensure(say: Callable[[str], None] = lambda s: None) -> str:
    """The base image's tag, built first when Docker lacks it."""
    image = tag()
    if image_present(image):
        return image
    if os.geteuid() != 0:
        raise KindError(f"building the kind base image {image} needs root (debootstrap, chroot); "
                        "run as root once, or pass --kind-node-image")
    try:  # a fresh machine has no debootstrap; as root we install it like every other prerequisite
        prereqs.ensure(["debootstrap"], "building the kind base image")
    except prereqs.PrereqError as e:
        raise KindError(str(e)) from None
    say("building containerd and crictl")
    built = builder.build_all([catalog.CONTAINERD, catalog.CRI_TOOLS], quiet=True)
    kind_files = module_source(catalog.KIND) / "images" / "base" / "files"
    rootfs = Path(tempfile.mkdtemp(prefix="dra-harness-rootfs-"))
    try:
        say(f"debootstrap {SUITE} with kind's packages")
        run(["debootstrap", "--variant=minbase", f"--include={','.join(PACKAGES)}", SUITE, str(rootfs), MIRROR],
            f"debootstrap {SUITE}", timeout=1800)
        say("assembling the base image")
        _assemble(rootfs, kind_files, built[catalog.CONTAINERD.dirname].directory, built[catalog.CRI_TOOLS.dirname].directory)
        _import(rootfs, image)
    finally:
        subprocess.run(["rm", "-rf", "--one-file-system", str(rootfs)], check=False)
    _drop_older(image)
    return image


def _drop_older(current: str) -> None:
    """Base images of earlier inputs are a stale cache: untag them (layers a node image still uses stay)."""
    out = subprocess.run(["docker", "image", "ls", "--format", "{{.Repository}}:{{.Tag}}", REPOSITORY],
                         capture_output=True, text=True).stdout.split()
    for old in (ref for ref in out if ref != current):
        subprocess.run(["docker", "rmi", old], capture_output=True)


def _install(src: Path, dest: Path, mode: int) -> None:
    dest.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(src, dest)
    dest.chmod(mode)


def _assemble(rootfs: Path, kind_files: Path, containerd: Path, cri_tools: Path) -> None:
    # kind's files, with the modes its Dockerfile gives them: scripts 0755, the rest 0644.
    for src in sorted(p for p in kind_files.rglob("*") if p.is_file()):
        rel = src.relative_to(kind_files)
        script = rel.parts[0] == "usr" or rel.parts[:2] == ("kind", "bin")
        _install(src, rootfs / rel, 0o755 if script else 0o644)
    for name in ("dra-harness-entrypoint", "dra-harness-pod-network"):
        _install(OUR_FILES / name, rootfs / "usr/local/bin" / name, 0o755)
    _install(OUR_FILES / "dra-harness-pod-network.service", rootfs / "etc/systemd/system/dra-harness-pod-network.service", 0o644)
    _install(OUR_FILES / "default-storage.yaml", rootfs / "kind/manifests/default-storage.yaml", 0o644)
    for name in ("containerd", "ctr", "containerd-shim-runc-v2"):
        _install(containerd / name, rootfs / "usr/local/bin" / name, 0o755)
    _install(cri_tools / "crictl", rootfs / "usr/local/bin/crictl", 0o755)
    for d in (rootfs / "kind", rootfs / "kind/bin"):
        d.chmod(0o755)
    (rootfs / "etc/containerd/cri-base.json").write_text(json.dumps(_cri_base_spec(containerd / "ctr"), indent=2))
    run(["chroot", str(rootfs), "/bin/bash", "-c", _SETUP], "setting up the base image's systemd", timeout=300)


def _cri_base_spec(ctr: Path) -> dict:
    """containerd's default OCI spec with kind's createContainer hook and no rlimits (as kind's Dockerfile)."""
    spec = json.loads(run([str(ctr), "oci", "spec"], "ctr oci spec", timeout=60))
    hooks = spec.setdefault("hooks", {}).setdefault("createContainer", [])
    hooks.append({"path": "/kind/bin/mount-product-files.sh"})
    spec.get("process", {}).pop("rlimits", None)
    return spec


def _import(rootfs: Path, image: str) -> None:
    """``docker import`` the tree, then set what ``import`` cannot (STOPSIGNAL) in a build without RUN steps."""
    flat = f"{image}-rootfs"
    tar = subprocess.Popen(["tar", "-C", str(rootfs), "--numeric-owner", "-c", "."], stdout=subprocess.PIPE)
    try:
        proc = subprocess.run(["docker", "import", "-", flat], stdin=tar.stdout, capture_output=True, timeout=900)
    finally:
        if tar.stdout:
            tar.stdout.close()
        tar.wait()
    if proc.returncode != 0 or tar.returncode != 0:
        raise KindError(f"docker import of the kind base image failed: {proc.stderr.decode(errors='replace').strip()[-300:]}")
    dockerfile = "\n".join([
        f"FROM {flat}",
        # systemd reads this to know it runs in a container (https://systemd.io/CONTAINER_INTERFACE/)
        "ENV container=docker",
        # systemd exits on SIGRTMIN+3; SIGTERM would make it re-execute
        "STOPSIGNAL SIGRTMIN+3",
        f"ENTRYPOINT {json.dumps(ENTRYPOINT)}",
        f"LABEL io.dra-harness.inputs={json.dumps(json.dumps(inputs(), sort_keys=True))}",
    ]) + "\n"
    try:
        run(["docker", "build", "-q", "-t", image, "-"], "tagging the kind base image", timeout=300, stdin=dockerfile.encode())
    finally:
        subprocess.run(["docker", "rmi", flat], capture_output=True)
