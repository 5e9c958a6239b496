"""Which API version each object is stored under in etcd, read from etcd itself.

Why read etcd: the API server converts on read, so a GET always answers in the version asked
for and never says how the object is stored. After an upgrade, objects written by the old
release stay encoded in its storage version until something rewrites them; only etcd shows
that. etcd serves its v3 API as JSON (grpc-gateway) on the client URL; the API server's client
certificate is the one the etcd CA signed for that. The only writes are a negative control's: an
object stored in a version no API server serves, put and deleted again around one read.

The API server stores protobuf as ``k8s\\x00`` followed by a ``runtime.Unknown`` message whose
field 1 is the ``TypeMeta`` (field 1 apiVersion, field 2 kind); JSON-stored objects carry
``apiVersion`` at top level.
"""

from __future__ import annotations

import base64
import json
import ssl
import urllib.request
from pathlib import Path

PROTOBUF_MAGIC = b"k8s\x00"


def _varint(data: bytes, at: int) -> tuple[int, int]:
    value, shift = 0, 0
    while True:
        byte = data[at]
        value |= (byte & 0x7F) << shift
        at += 1
        if not byte & 0x80:
            return value, at
        shift += 7


def _fields(message: bytes) -> dict[int, bytes]:
    """The length-delimited fields of a protobuf message (first occurrence of each); others skipped."""
    found: dict[int, bytes] = {}
    at = 0
    while at < len(message):
        key, at = _varint(message, at)
        number, wire = key >> 3, key & 7
        if wire == 2:
            length, at = _varint(message, at)
            found.setdefault(number, message[at : at + length])
            at += length
        elif wire == 0:
            _, at = _varint(message, at)
        elif wire == 1:
            at += 8
        elif wire == 5:
            at += 4
        else:
            raise ValueError(f"unsupported protobuf wire type {wire}")
    return found


def stored_type(value: bytes) -> tuple[str, str]:
    """``(apiVersion, kind)`` of one stored object (protobuf or JSON encoded)."""
    if value.startswith(PROTOBUF_MAGIC):
        type_meta = _fields(_fields(value[len(PROTOBUF_MAGIC):]).get(1, b""))
        return type_meta.get(1, b"").decode(), type_meta.get(2, b"").decode()
    obj = json.loads(value)
    return obj.get("apiVersion", ""), obj.get("kind", "")


def _prefix_end(prefix: bytes) -> bytes:
    """The smallest key after every key starting with ``prefix`` (etcd's range_end for a prefix)."""
    end = bytearray(prefix)
    end[-1] += 1
    return bytes(end)


class EtcdReader:
    """Read-only access to the embedded cluster's etcd over its TLS client URL."""

    def __init__(self, url: str, ca: Path, cert: Path, key: Path) -> None:
        self.url = url.rstrip("/")
        self.context = ssl.create_default_context(cafile=str(ca))
        self.context.load_cert_chain(str(cert), str(key))

    def _call(self, method: str, body: dict[str, str]) -> dict:
        encoded = {k: base64.b64encode(v.encode() if isinstance(v, str) else v).decode() for k, v in body.items()}
        req = urllib.request.Request(f"{self.url}/v3/kv/{method}", data=json.dumps(encoded).encode(),
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, context=self.context, timeout=10) as r:
            return json.loads(r.read())

    def range(self, prefix: str) -> dict[str, bytes]:
        """key -> value of every key under ``prefix``."""
        answer = self._call("range", {"key": prefix, "range_end": _prefix_end(prefix.encode()).decode()})
        return {base64.b64decode(kv["key"]).decode(): base64.b64decode(kv.get("value", "")) for kv in answer.get("kvs") or []}

    def put(self, key: str, value: str) -> None:
        """Store ``value`` at ``key`` behind the API server's back (a negative control's fault)."""
        self._call("put", {"key": key, "value": value})

    def delete(self, key: str) -> None:
        self._call("deleterange", {"key": key})

    def stored_versions(self, prefix: str) -> dict[str, str]:
        """key -> the ``apiVersion`` it is stored under, for every key under ``prefix``."""
        return {key: stored_type(value)[0] for key, value in self.range(prefix).items()}
