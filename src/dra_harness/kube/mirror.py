"""A namespace's objects of one kind, kept current by list+watch in a thread: what a poll reads instead of a LIST.

Why: the virtual clock looks at the queue design's Jobs and Workloads every 10 ms while a step settles;
listing them each time grew with the run (a thousand finished Jobs listed a hundred times a second
while mixed-1000 ran, slowing every step). A watch sends only what changed. :attr:`Mirror.changes`
counts the changes seen, for a quiet window that waits for them to stop.
"""

from __future__ import annotations

import threading
import time

from dra_harness.kube import rest
from dra_harness.kube.rest import Gone, Kube, Unreachable
from dra_harness.kube.types import Obj

#: How long :meth:`Mirror.start` waits for the first list.
SYNC_S = 30.0


class Mirror:
    def __init__(self, kube: Kube, res: rest.Resource, namespace: str) -> None:
        self.kube, self.res, self.namespace = kube, res, namespace
        self.objects: dict[str, Obj] = {}
        self.changes = 0
        self.lock = threading.Lock()
        self._stop = threading.Event()
        self._synced = threading.Event()
        self._thread = threading.Thread(target=self._follow, daemon=True, name=f"mirror-{res.plural}")

    def start(self) -> Mirror:
        self._thread.start()
        if not self._synced.wait(SYNC_S):
            raise Unreachable(f"listing {self.res.plural} in {self.namespace} did not answer within {SYNC_S:.0f} s")
        return self

    def close(self) -> None:
        self._stop.set()
        if self._thread.ident is not None:
            self._thread.join(10)

    def items(self) -> list[Obj]:
        with self.lock:
            return list(self.objects.values())

    def _follow(self) -> None:
        version = ""
        while not self._stop.is_set():
            try:
                if not version:
                    items, version = self.kube.list_with_version(self.res, self.namespace)
                    with self.lock:
                        self.objects = {o["metadata"]["name"]: o for o in items}
                        self.changes += 1
                    self._synced.set()
                for kind, obj in self.kube.watch(self.res, self.namespace, version, timeout_seconds=5):
                    version = obj.get("metadata", {}).get("resourceVersion") or version
                    if kind in ("ADDED", "MODIFIED", "DELETED"):
                        with self.lock:
                            if kind == "DELETED":
                                self.objects.pop(obj["metadata"]["name"], None)
                            else:
                                self.objects[obj["metadata"]["name"]] = obj
                            self.changes += 1
                    if self._stop.is_set():
                        return
            except Gone:
                version = ""  # too old: list again
            except (Unreachable, rest.ApiError):
                time.sleep(0.5)
