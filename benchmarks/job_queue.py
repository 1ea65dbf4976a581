"""Job queue throughput: N jobs drained by W worker processes (claim, then complete) on
PostgreSQL (a throw-away server started here on 127.0.0.1) and on SQLite, beside the same queue
drained by one worker (the baseline, same run): claims per second, median and 95th-percentile
claim latency, the 8-worker speed-up, and the check that no job was lost or done twice. The
queue's share of a measurement is its per-job cost (claim + complete) over a 1 s measurement.

    python benchmarks/job_queue.py [--jobs 10000] [--workers 8] [--baseline-jobs 2000]
        [--engines postgres,sqlite] [--json out.json]
"""
from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from anb.jobs.queue import Capability, JobSpec, open_queue

CAPS = [Capability("measure", "bench")]


def drain(url: str, name: str, start, out) -> None:
    """Claim and complete jobs until none is left; report ids and latencies."""
    claims, completes, ids = [], [], []
    with open_queue(url) as q:
        start.wait()
        while True:
            t0 = time.perf_counter()
            job = q.claim(name, CAPS, 300)
            t1 = time.perf_counter()
            if job is None:
                break
            claims.append(t1 - t0)
            if not q.complete(job, {"by": name}):
                raise RuntimeError(f"{name}: result of job {job.id} refused")
            completes.append(time.perf_counter() - t1)
            ids.append(job.id)
    out.put((name, ids, claims, completes, time.perf_counter()))


def run(url: str, jobs: int, workers: int) -> dict:
    with open_queue(url) as q:
        q.submit(JobSpec(f"arch-{i:06d}", "bench", "measure", priority=i % 7) for i in range(jobs))
    ctx = mp.get_context("spawn")
    start, out = ctx.Event(), ctx.Queue()
    procs = [ctx.Process(target=drain, args=(url, f"w{k}", start, out)) for k in range(workers)]
    for p in procs:
        p.start()
    time.sleep(2.0)  # every worker connected and waiting
    began = time.perf_counter()
    start.set()
    results = [out.get(timeout=3600) for _ in procs]
    for p in procs:
        p.join()
    wall = max(r[4] for r in results) - began
    ids = [i for r in results for i in r[1]]
    claims = [c for r in results for c in r[2]]
    completes = [c for r in results for c in r[3]]
    with open_queue(url) as q:
        counts = q.counts()
        refused_or_open = {k: v for k, v in counts.items() if k[2] != "done"}
        wrong = sum(1 for j in q.jobs(state="done", limit=jobs) if j.result["by"] != j.worker)
    lost = jobs - len(set(ids))
    twice = len(ids) - len(set(ids))
    claims.sort()
    return {"jobs": jobs, "workers": workers, "wall_s": round(wall, 3),
            "claims_per_s": round(len(ids) / wall, 1),
            "claim_median_ms": round(1e3 * statistics.median(claims), 3),
            "claim_p95_ms": round(1e3 * claims[int(0.95 * len(claims))], 3),
            "complete_median_ms": round(1e3 * statistics.median(completes), 3),
            "lost": lost, "done_twice": twice, "not_done": sum(refused_or_open.values()),
            "result_by_other_worker": wrong}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--baseline-jobs", type=int, default=2_000)
    parser.add_argument("--engines", default="postgres,sqlite")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    rows = []
    for engine in args.engines.split(","):
        for label, jobs, workers in (("1 worker (baseline)", args.baseline_jobs, 1),
                                     (f"{args.workers} workers", args.jobs, args.workers)):
            with tempfile.TemporaryDirectory(prefix="anb-bench-") as tmp:
                if engine == "sqlite":
                    row = run(str(Path(tmp) / "queue.db"), jobs, workers)
                else:
                    from tests.realservers import postgres_server

                    with postgres_server() as server:
                        row = run(server.url, jobs, workers)
            rows.append({"engine": engine, "run": label, **row})
            print(json.dumps(rows[-1]), flush=True)
    print(f"\n{'engine':<9} {'run':<20} {'jobs':>6} {'claims/s':>9} {'median ms':>10} "
          f"{'p95 ms':>8} {'lost':>5} {'twice':>6}")
    for r in rows:
        print(f"{r['engine']:<9} {r['run']:<20} {r['jobs']:>6} {r['claims_per_s']:>9} "
              f"{r['claim_median_ms']:>10} {r['claim_p95_ms']:>8} {r['lost']:>5} "
              f"{r['done_twice']:>6}")
    for engine in args.engines.split(","):
        base, many = [r for r in rows if r["engine"] == engine]
        per_job_ms = many["claim_median_ms"] + many["complete_median_ms"]
        print(f"{engine}: {args.workers}-worker / 1-worker claims/s = "
              f"{many['claims_per_s'] / base['claims_per_s']:.2f}; queue cost per job "
              f"{per_job_ms:.2f} ms = {per_job_ms / 10:.3f} % of a 1 s measurement")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    from publish import published

    with published(__file__):
        main()
