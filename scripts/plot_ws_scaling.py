#!/usr/bin/python3
"""Plot of scripts/bench_ws's ws_scaling.csv: simulated samples/s against the number of systems,
one line per SwarmX link rate, with the weight-stream share of each minibatch beside it.
Usage: plot_ws_scaling.py ws_scaling.csv out.png   (Debian's /usr/bin/python3 with python3-matplotlib)"""
import csv
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    rows = list(csv.DictReader(open(sys.argv[1])))
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 4))
    for gbps in sorted({r["swarmx_gbps"] for r in rows}, key=float, reverse=True):
        sel = [r for r in rows if r["swarmx_gbps"] == gbps]
        n = [int(r["systems"]) for r in sel]
        ax1.plot(n, [float(r["samples_per_s"]) for r in sel], marker="o", label=f"SwarmX {gbps} Gb/s")
        share = []
        for r in sel:
            t = sum(int(r[k]) for k in ("compute", "weight_stream", "grad_reduce", "input_stall"))
            share.append(100.0 * int(r["weight_stream"]) / t)
        ax2.plot(n, share, marker="o", label=f"SwarmX {gbps} Gb/s")
    for ax in (ax1, ax2):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("systems (global batch fixed)")
        ax.legend()
        ax.grid(True, alpha=0.3)
    ax1.set_ylabel("simulated samples/s")
    ax2.set_ylabel("weight-stream stall, % of a minibatch")
    fig.suptitle("Weight streaming: scaling over CS-2 systems (wafersim)")
    fig.tight_layout()
    fig.savefig(sys.argv[2], dpi=120)


if __name__ == "__main__":
    main()
