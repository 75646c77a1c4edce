"""Training curves: one figure per adapter from its `metrics.jsonl` (one row per optimiser step).

GRPO rows carry reward, pass rate, zero-variance groups, truncation, KL, every loss term and the
resident memory after the step;
gold-SFT rows carry the loss. A panel is drawn for each group of keys the file has, so a run
that records fewer (or newer) metrics still gets a figure of what it has.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

from jacrl.io import atomic_path, read_jsonl

# (panel title, which keys it draws, y label)
PANELS: tuple[tuple[str, Callable[[str], bool], str], ...] = (
    ("reward", lambda k: k == "reward/mean", "mean reward (band: ± std)"),
    ("pass rate", lambda k: k in ("reward/pass_rate", "reward/runs_rate"), "share of samples"),
    ("σ = 0 groups", lambda k: k == "groups/zero_variance_frac", "share of groups with zero reward variance"),
    ("truncation", lambda k: k == "samples/truncated_frac", "share of samples cut at the length cap"),
    ("KL", lambda k: k.startswith("kl/") or k.endswith("/mismatch_kl"), "KL (reference; sampler mismatch)"),
    ("loss terms", lambda k: k in ("loss", "loss/total") or (k.startswith("loss/") and k.endswith("/loss")), "loss"),
    ("memory", lambda k: k in ("mem/rss_mb", "mem/peak_rss_mb"), "resident MB after the step; the peak so far"),
)


def series(rows: list[dict], key: str) -> tuple[list[float], list[float]]:
    """(steps, values) where `key` holds a finite number; steps default to the row's position."""
    xs, ys = [], []
    for i, r in enumerate(rows, start=1):
        v = r.get(key)
        if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
            xs.append(float(r.get("step", i)))
            ys.append(float(v))
    return xs, ys


def panel_keys(rows: list[dict]) -> list[tuple[str, str, list[str]]]:
    """[(title, y label, keys)] for the panels with at least one recorded value, in PANELS order."""
    keys = sorted({k for r in rows for k in r})
    out = []
    for title, takes, ylabel in PANELS:
        mine = [k for k in keys if takes(k) and series(rows, k)[0]]
        if mine:
            out.append((title, ylabel, mine))
    return out


def plot_curves(rows: list[dict], out: str | Path, title: str) -> list[str]:
    """Draw the figure to `out` (PNG, atomically); returns the panel titles drawn."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    panels = panel_keys(rows)
    cols = min(3, max(1, len(panels)))
    nrows = max(1, math.ceil(len(panels) / cols))
    fig, axes = plt.subplots(nrows, cols, figsize=(4.6 * cols, 3.2 * nrows), squeeze=False)
    flat = [ax for row in axes for ax in row]
    for ax, (name, ylabel, keys) in zip(flat, panels):
        for key in keys:
            xs, ys = series(rows, key)
            line = ax.plot(xs, ys, marker="o" if len(xs) <= 60 else None, markersize=3, label=key)[0]
            if key == "reward/mean":
                _band(ax, rows, xs, ys, line.get_color())
        ax.set_title(name)
        ax.set_xlabel("step")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_ylabel(ylabel, fontsize=8)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    for ax in flat[len(panels) :]:
        ax.axis("off")
    if not panels:
        flat[0].text(0.5, 0.5, "no metrics recorded", ha="center", va="center")
    fig.suptitle(f"{title} · {len(rows)} steps")
    fig.tight_layout()
    with atomic_path(out, suffix=".png") as tmp:
        fig.savefig(tmp, dpi=100, format="png")
    plt.close(fig)
    return [p[0] for p in panels]


def _band(ax, rows: list[dict], xs: list[float], ys: list[float], color: str) -> None:
    """Shade mean ± std where the std was recorded at the same steps."""
    sx, sd = series(rows, "reward/std")
    std = dict(zip(sx, sd))
    if std and all(x in std for x in xs):
        ax.fill_between(
            xs,
            [y - std[x] for x, y in zip(xs, ys)],
            [y + std[x] for x, y in zip(xs, ys)],
            color=color,
            alpha=0.15,
            linewidth=0,
        )


def write_curves(adapter_dir: str | Path, out: str | Path, title: str) -> list[str]:
    """The figure of `adapter_dir/metrics.jsonl`; a missing file is an error naming it."""
    path = Path(adapter_dir) / "metrics.jsonl"
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no training metrics (is {adapter_dir} an adapter folder?)")
    return plot_curves(read_jsonl(path), out, title)
