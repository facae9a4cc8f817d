#!/usr/bin/python3
"""Bar chart of `wafersim validate`'s validation.json: simulated against published cycles per
case (left, log scale) and the error in percent (right, the +-10 % band shaded).
Usage: plot_validation.py validation.json out.png   (Debian's /usr/bin/python3 with python3-matplotlib)"""
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    try:
        doc = json.load(open(sys.argv[1]))
        cases = doc["cases"]
        names = [c["case"] for c in cases]
        pub = [float(c["published_cycles"]) for c in cases]
        sim = [float(c["simulated_cycles"]) for c in cases]
        err = [float(c["error_pct"]) for c in cases]
    except (OSError, ValueError, KeyError, TypeError) as e:
        sys.exit(f"plot_validation.py: {sys.argv[1]}: not a validation.json ({e})")
    if not cases:
        sys.exit(f"plot_validation.py: {sys.argv[1]}: no cases")
    y = list(range(len(names)))
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 0.45 * len(names) + 1.6), sharey=True)
    h = 0.4
    ax1.barh([i - h / 2 for i in y], pub, h, label="published (CS-2 / CS-1)", color="tab:gray")
    ax1.barh([i + h / 2 for i in y], sim, h, label="wafersim", color="tab:blue")
    ax1.set_xscale("log")
    ax1.set_xlabel("cycles")
    ax1.set_yticks(y)
    ax1.set_yticklabels(names)
    ax1.invert_yaxis()
    ax1.legend(loc="lower right", fontsize="small")
    ax2.axvspan(-10, 10, color="tab:green", alpha=0.15, label="within 10 %")
    ax2.barh(y, err, color=["tab:green" if abs(e) <= 10 else "tab:red" for e in err])
    ax2.axvline(0, color="black", linewidth=0.8)
    ax2.set_xlabel("error (simulated - published) / published, %")
    ax2.legend(loc="lower right", fontsize="small")
    fig.suptitle(f"wafersim validation: mean absolute error {doc.get('mean_abs_error_pct', 0):.1f} % over {len(cases)} cases")
    fig.tight_layout()
    tmp = sys.argv[2] + ".tmp.png"
    fig.savefig(tmp, dpi=110)
    os.replace(tmp, sys.argv[2])  # atomic: an interrupted run leaves the old chart


if __name__ == "__main__":
    main()
