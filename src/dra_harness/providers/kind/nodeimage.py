"""``dra-harness kind build-node-image``: a kind node image for one Kubernetes release, built without a registry.

Why not ``kind build node-image``: it side-loads only the four images inside a Kubernetes
release tarball and fetches etcd, CoreDNS, pause and its add-ons from their registries.
We do what it does, with everything built here: start a container from the base image
(``baseimage``), copy kubeadm, kubelet and kubectl into ``/usr/bin``, run containerd
inside it and import every image the node needs into the ``k8s.io`` namespace with
kind's own ``ctr images import`` flags (pinned, not unpacked), then commit the container
with kind's entrypoint. The images:

* kube-apiserver, kube-controller-manager, kube-scheduler: the static binaries we build;
* kube-proxy: our binary plus iptables, conntrack and their libraries copied from the
  base image's Debian packages (upstream's image is distroless Debian iptables);
* etcd and CoreDNS we build, one version each for every release: the kind config tells
  kubeadm their tags (:func:`kubeadm_patches`);
* pause, as the sandbox image kind's containerd config names.

The image is tagged ``dra-harness.local/kind-node:v<release>`` and labelled with a
digest of its inputs: an unchanged build is reused, a changed input rebuilds it.
"""

from __future__ import annotations

import hashlib
import io
import json
import secrets
import subprocess
import tarfile
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from dra_harness.components import build as builder
from dra_harness.components import catalog
from dra_harness.components.images import pause_image
from dra_harness.components.oci import File, Image, write_layout
from dra_harness.providers.kind import baseimage
from dra_harness.providers.kind.tools import KindError, image_label, run

REPOSITORY = "dra-harness.local/kind-node"
INPUTS_LABEL = "io.dra-harness.inputs"
#: Bump for a change the inputs would not show (the build code itself is an input).
FORMAT = 1
ETCD_TAG = f"{catalog.ETCD_VERSION}-0"
COREDNS_TAG = f"v{catalog.COREDNS_VERSION}"
KIND_ENTRYPOINT = ["/usr/local/bin/dra-harness-entrypoint", "/usr/local/bin/entrypoint", "/sbin/init"]
IMAGE_PATH = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

# The files kube-proxy runs beyond itself: iptables (nft and legacy), conntrack, the
# alternatives links Debian resolves them through, and every shared library they load.
_PROXY_FILES = r"""set -e
{
  dpkg -L iptables conntrack | while read -r f; do [ -f "$f" ] || [ -L "$f" ] && echo "$f"; done
  # update-alternatives makes these links in postinst, so dpkg -L does not list them.
  ls -d /usr/sbin/*tables* /etc/alternatives/*tables* /etc/protocols /etc/services /etc/ethertypes 2>/dev/null || true
} | sort -u > /tmp/files
for f in $(cat /tmp/files); do
  if [ -f "$f" ] && ! [ -L "$f" ]; then ldd "$f" 2>/dev/null | awk '/=> \// {print $3} /^[ \t]*\/lib64/ {print $1}'; fi
done | sort -u > /tmp/libs
for f in $(cat /tmp/files /tmp/libs | sort -u); do
  d=$(readlink -f "$(dirname "$f")"); echo "$d/$(basename "$f")"
  [ -L "$f" ] && readlink -f "$f"
done | sort -u | sed 's|^/||' > /tmp/all
tar -C / --no-recursion -c -T /tmp/all
"""


def tag(version: str) -> str:
    return f"{REPOSITORY}:v{version}"


def kubeadm_patches() -> list[str]:
    """kind ``kubeadmConfigPatches`` that name the etcd and CoreDNS tags our node images carry."""
    return [
        "kind: ClusterConfiguration\n"
        f"etcd:\n  local:\n    imageTag: {ETCD_TAG}\n"
        f"dns:\n  imageTag: {COREDNS_TAG}\n"
    ]


def _inputs(version: str, base: str) -> str:
    builder_code = baseimage.source_digest(_PROXY_FILES, _WAIT_FOR_CONTAINERD, ensure, _proxy_files, _binary_image, _images,
                                           _preload)
    doc = {"format": FORMAT, "builder": builder_code, "base": base, "kubernetes": version, "etcd": catalog.ETCD_VERSION,
           "coredns": catalog.COREDNS_VERSION, "go": builder.go_version()}
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:16]


def built_here(image: str) -> bool:
    """An image this module built (it carries our inputs label): it needs :func:`kubeadm_patches` and no kindnetd."""
    return image_label(image, INPUTS_LABEL) is not None


def ensure(version: str, say: Callable[[str], None] = lambda s: None) -> tuple[str, float]:
    """The node image for ``version`` (built when missing or stale) and the seconds spent building."""
    started = time.monotonic()
    catalog.kubernetes(version)  # an unsupported version fails here, in one line
    base = baseimage.ensure(say)
    image, want = tag(version), _inputs(version, base)
    if image_label(image, INPUTS_LABEL) == want:
        return image, 0.0
    say(f"building Kubernetes v{version}, etcd and CoreDNS")
    comps = [catalog.kubernetes(version), catalog.kubelet(version), catalog.kind_node(version), catalog.ETCD, catalog.COREDNS]
    done = builder.build_all(comps, quiet=True)
    built = {c.name: done[c.dirname].directory for c in comps}
    container = f"dra-harness-build-{secrets.token_hex(4)}"
    run(["docker", "run", "-d", "--entrypoint=sleep", f"--name={container}", "--security-opt", "seccomp=unconfined",
         base, "infinity"], "starting the node image build container", timeout=120)
    try:
        say("installing kubeadm, kubelet and kubectl")
        for name, comp in (("kubeadm", "kind-node"), ("kubelet", "kubelet"), ("kubectl", "kubernetes")):
            run(["docker", "cp", str(built[comp] / name), f"{container}:/usr/bin/{name}"], f"copying {name}", timeout=120)
        _exec(container, f"chmod 0755 /usr/bin/kubeadm /usr/bin/kubelet /usr/bin/kubectl && "
                         f"chown root:root /usr/bin/kubeadm /usr/bin/kubelet /usr/bin/kubectl && printf v{version} > /kind/version")
        proxy_libs = _proxy_files(container)
        with tempfile.TemporaryDirectory(prefix="dra-harness-node-images-") as tmp:
            archives = [write_layout(img, Path(tmp) / f"{i}.tar") for i, img in enumerate(_images(version, built, proxy_libs))]
            say(f"preloading {len(archives)} images")
            _preload(container, archives)
        run(["docker", "commit", "--change", f"ENTRYPOINT {json.dumps(KIND_ENTRYPOINT)}",
             "--change", f"LABEL {INPUTS_LABEL}={want}", container, image], f"committing {image}", timeout=600)
    finally:
        subprocess.run(["docker", "rm", "-f", container], capture_output=True, timeout=120)
    # The image this tag named before is now untagged: drop it (only ours carry the label).
    subprocess.run(["docker", "image", "prune", "-f", "--filter", f"label={INPUTS_LABEL}"], capture_output=True, timeout=300)
    return image, time.monotonic() - started


def _exec(container: str, script: str, timeout: float = 300, stdin: bytes | None = None) -> bytes:
    proc = subprocess.run(["docker", "exec", "-i", container, "bash", "-c", script], input=stdin,
                          capture_output=True, timeout=timeout)
    if proc.returncode != 0:
        raise KindError(f"node image build: `{script.splitlines()[0][:60]}` failed: "
                        f"{proc.stderr.decode(errors='replace').strip()[-300:]}")
    return proc.stdout


def _proxy_files(container: str) -> list[File]:
    """kube-proxy's iptables and conntrack, with their libraries, as image files."""
    files = []
    with tarfile.open(fileobj=io.BytesIO(_exec(container, _PROXY_FILES)), mode="r:") as tar:
        for member in tar.getmembers():
            if member.issym():
                files.append(File(member.name, link=member.linkname))
            elif member.isfile():
                data = tar.extractfile(member)
                files.append(File(member.name, data.read() if data else b"", mode=member.mode & 0o7777))
    # Debian's merged /usr: the loader and libraries are found through /lib and /lib64 too.
    return files + [File("lib", link="usr/lib"), File("lib64", link="usr/lib64"), File("sbin", link="usr/sbin"),
                    File("bin", link="usr/bin"), File("tmp/.keep", b"", 0o644)]


def _binary_image(name: str, ref: str, binary: Path, extra: list[File] | None = None) -> Image:
    files = [File(f"usr/local/bin/{name}", binary.read_bytes()), *(extra or [])]
    if not extra:
        files.append(File("tmp/.keep", b"", 0o644))
    return Image(ref, files, entrypoint=[f"/usr/local/bin/{name}"], env=[IMAGE_PATH])


def _images(version: str, built: dict[str, Path], proxy_files: list[File]) -> list[Image]:
    registry = "registry.k8s.io"
    images = [_binary_image(n, f"{registry}/{n}:v{version}", built["kubernetes"] / n)
              for n in ("kube-apiserver", "kube-controller-manager", "kube-scheduler")]
    images.append(_binary_image("kube-proxy", f"{registry}/kube-proxy:v{version}", built["kind-node"] / "kube-proxy", proxy_files))
    images.append(_binary_image("etcd", f"{registry}/etcd:{ETCD_TAG}", built["etcd"] / "etcd"))
    coredns = built["coredns"] / "coredns"
    images.append(Image(f"{registry}/coredns/coredns:{COREDNS_TAG}", [File("coredns", coredns.read_bytes()), File("tmp/.keep", b"", 0o644)],
                        entrypoint=["/coredns"], env=[IMAGE_PATH]))
    images.append(pause_image())
    return images


_WAIT_FOR_CONTAINERD = """for i in $(seq 1 30); do [ -S /run/containerd/containerd.sock ] && ctr info >/dev/null 2>&1 && exit 0; sleep 1; done
echo "containerd did not start in the build container" >&2; exit 1"""


def _preload(container: str, archives: list[Path]) -> None:
    """kind's image import: containerd inside the build container, images pinned and not unpacked."""
    _exec(container, "nohup containerd > /var/log/containerd-build.log 2>&1 &")
    _exec(container, _WAIT_FOR_CONTAINERD, timeout=60)
    try:
        for archive in archives:
            _exec(container, "ctr --namespace=k8s.io images import --label=io.cri-containerd.pinned=pinned "
                             "--all-platforms --no-unpack --digests -", stdin=archive.read_bytes(), timeout=600)
    finally:
        _exec(container, "pkill containerd; for i in $(seq 1 30); do pgrep -x containerd >/dev/null || exit 0; sleep 1; done",
              timeout=60)


def preloaded(image: str) -> list[str]:
    """The image references a node image's containerd holds (for the report and the tests)."""
    out = run(["docker", "run", "--rm", "--entrypoint=bash", image, "-c",
               "nohup containerd >/dev/null 2>&1 & for i in $(seq 1 30); do ctr info >/dev/null 2>&1 && break; sleep 1; done; "
               "ctr --namespace=k8s.io images list -q"], f"listing the images in {image}", timeout=120)
    # ``--digests`` also names each import "import-<date>@sha256:..."; those are not references.
    return sorted(ln for ln in out.split() if not ln.startswith(("sha256:", "import-")))
