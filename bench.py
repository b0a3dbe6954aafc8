"""VERDICT performance benchmark: consensus throughput, step overhead, memory.

Sinha et al., "VERDICT: Training-Free Step-Wise Verification of Multimodal Reasoning via
Disagreement-Aware Consensus", ECCV 2026 (the closed-form consensus; the 3.80× sequential
wall-clock overhead reported in the limitations).

    python bench.py            # prints the report and writes bench_report.md

Every ratio in the report is measured within one run, on one machine, so the machine's speed
cancels out; absolute times are shown for reference only.
"""
from __future__ import annotations

import argparse
import platform
import time

import numpy as np

import verdict


def best_of(f, repeat: int = 5) -> float:
    """The fastest of `repeat` wall-clock runs of f(), in seconds (the least disturbed one)."""
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        f()
        times.append(time.perf_counter() - t)
    return min(times)


def system_matrix(lam) -> np.ndarray:
    """The paper's A with A s* = diag(λ) ŝ: A_ii = 1 + λ_i, A_ij = −1/(m−1).  -> [m, m]"""
    m = len(lam)
    return np.full((m, m), -1.0 / (m - 1)) + np.diag(1.0 + np.asarray(lam) + 1.0 / (m - 1))


def consensus_throughput(sizes=(10**3, 10**4, 10**5, 10**6), loop_max: int = 10**5) -> list[str]:
    """Time the closed form against np.linalg.solve (looped and batched) and a plain mean on [N, 3]."""
    lam = np.array(verdict.STUBBORNNESS)
    A = system_matrix(lam)
    rows = ["| N | closed form | loop of solve | batched solve | mean (floor) | loop / closed | batched / closed | closed / mean |",
            "|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for N in sizes:
        s_hat = np.random.default_rng(N).random((N, 3))                 # [N, 3]
        t_closed = best_of(lambda: verdict.consensus(s_hat, lam))
        t_mean = best_of(lambda: s_hat.mean(axis=-1))
        rhs = s_hat * lam                                                # [N, 3]
        A_b = np.broadcast_to(A, (N, 3, 3))
        t_batched = best_of(lambda: np.linalg.solve(A_b, rhs[..., None]), repeat=3)
        t_loop = best_of(lambda: [np.linalg.solve(A, r) for r in rhs], repeat=1) if N <= loop_max else float("nan")
        ms = lambda t: "—" if t != t else f"{t * 1e3:.2f} ms"
        ratio = lambda a, b: "—" if a != a else f"{a / b:.1f}×"
        rows.append(f"| {N:,} | {ms(t_closed)} | {ms(t_loop)} | {ms(t_batched)} | {ms(t_mean)} | "
                    f"{ratio(t_loop, t_closed)} | {ratio(t_batched, t_closed)} | {ratio(t_closed, t_mean)} |")
    rows.append(f"\nThe loop of np.linalg.solve is timed up to N = {loop_max:,} only (it grows linearly).")
    return rows


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default="bench_report.md", help="where to write the report")
    args = p.parse_args(argv)
    lines = ["# VERDICT benchmark report", "",
             f"Machine: {platform.machine()}, {platform.processor() or 'unknown CPU'}, Python {platform.python_version()}, "
             f"NumPy {np.__version__}.", "", "## 1. Consensus throughput on [N, 3] (best of 5)", ""]
    lines += consensus_throughput()
    report = "\n".join(lines) + "\n"
    print(report)
    with open(args.out, "w") as fh:
        fh.write(report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
