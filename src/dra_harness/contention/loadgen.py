"""The arrival driver: locust, in its own process, creates each job's pod on time.

locust monkey-patches the standard library with gevent on import, which must never
happen inside pytest or the harness's own threads; so this module runs only as
``python -m dra_harness.contention.loadgen PLAN OUT`` and the parent talks to it through
two files. PLAN (JSON, written 0600 in a private temp dir, removed as soon as it is read) holds the API
server's address and client-certificate paths and every job's pod and wall-clock
arrival; OUT gets one JSON line per job with when its create was sent and answered,
and a last line with locust's request statistics.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path


def main(plan_path: str, out_path: str) -> int:
    import gevent
    from locust import HttpUser, constant, events, task
    from locust.env import Environment
    from locust.exception import StopUser

    plan = json.loads(Path(plan_path).read_text())
    # Read once, gone at once: it may hold a bearer token, and a run killed outright cannot clean up after us.
    Path(plan_path).unlink(missing_ok=True)
    jobs = plan["jobs"]
    t0 = plan["t0"]
    results: list[dict] = []
    nxt = iter(range(len(jobs)))

    class Submitter(HttpUser):
        host = plan["host"]
        wait_time = constant(0)

        def on_start(self) -> None:
            self.client.verify = plan.get("ca") or False
            if plan.get("cert"):
                self.client.cert = (plan["cert"], plan["key"])
            self.client.headers.update(plan.get("headers") or {})

        @task
        def submit(self) -> None:
            i = next(nxt, None)
            if i is None:
                raise StopUser()
            job = jobs[i]
            delay = t0 + job["at"] - time.time()
            if delay > 0:
                gevent.sleep(delay)
            sent = time.time()
            status, attempts = 0, 0
            while attempts < 6:
                attempts += 1
                with self.client.post(plan["path"], json=job["body"], name=f"create pod ({job['tier']})",
                                      catch_response=True) as resp:
                    status = resp.status_code
                    if status in (201, 409):   # 409 after a retry: the first create went through
                        resp.success()
                        break
                    resp.failure(f"{status}")
                gevent.sleep(0.2 * attempts)
            results.append({"name": job["name"], "sent": sent, "answered": time.time(),
                            "late_s": round(sent - (t0 + job["at"]), 4), "status": status, "attempts": attempts})

    env = Environment(user_classes=[Submitter], events=events)
    runner = env.create_local_runner()
    users = max(1, min(plan.get("users", 50), len(jobs)))
    runner.start(users, spawn_rate=users)
    deadline = time.time() + plan["timeout"]
    while len(results) < len(jobs) and time.time() < deadline:
        gevent.sleep(0.1)
    runner.quit()
    total = env.stats.total
    with open(out_path, "w") as f:
        for r in results:
            f.write(json.dumps(r) + "\n")
        f.write(json.dumps({"locust": {
            "requests": total.num_requests, "failures": total.num_failures,
            "median_ms": total.get_response_time_percentile(0.5), "p95_ms": total.get_response_time_percentile(0.95),
            "max_ms": total.max_response_time, "users": users}}) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
