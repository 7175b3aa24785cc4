"""PNG charts for ``fcctl analyze --out``. matplotlib is imported here only (Agg backend)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from fcctl.analyzers.analyze import AnalysisResult


def _pyplot() -> Any:
    try:
        import matplotlib
    except ImportError as e:  # pragma: no cover - core dependency
        raise RuntimeError("charts need matplotlib: pip install 'matplotlib>=3.7'") from e
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def reuse_distance_cdf(result: AnalysisResult, path: Path) -> bool:
    """CDF of reuse distance: stack distance (bytes), requests, seconds. False if no reuse."""
    cdf = result.tables.cdf
    if cdf.height == 0:
        return False
    plt = _pyplot()
    panels = [
        ("stack_bytes", f"LRU stack distance (GiB of KV, {result.kv.model})"),
        ("requests", "distance (requests)"),
        ("seconds", "distance (seconds; exact at log2 bucket edges)"),
    ]
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.8))
    for ax, (metric, label) in zip(axes, panels, strict=True):
        part = cdf.filter(cdf["metric"] == metric)
        x = part["value"].to_numpy() / (2**30 if metric == "stack_bytes" else 1)
        y = part["cum_share"].to_numpy()
        # log axes cannot show 0: distance 0 is drawn at the smallest positive value / 2.
        pos = x[x > 0]
        floor = pos.min() / 2 if pos.shape[0] else 1.0
        ax.step(np.where(x > 0, x, floor), y, where="post")
        ax.set_xscale("log")
        ax.set_ylim(0, 1.02)
        ax.set_xlabel(label)
        ax.grid(True, alpha=0.3)
    axes[0].set_ylabel("share of re-accesses")
    fig.suptitle(f"Reuse distance CDF: {Path(result.trace.path).name}")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def session_kv_cdf(result: AnalysisResult, path: Path) -> bool:
    """CDF of per-session KV bytes. False when the trace has no sessions."""
    if result.sessions is None or result.sessions.count == 0:
        return False
    plt = _pyplot()
    from fcctl.analyzers.verdict import FLAT_SESSION_KV_P90_BYTES

    kv = np.sort(result.sessions.table["kv_bytes"].to_numpy().astype(np.float64))
    # The empirical CDF starts at 0 just left of the smallest session, then steps up.
    x = np.concatenate([kv[:1], kv]) / 2**30
    y = np.concatenate([[0.0], np.arange(1, kv.shape[0] + 1) / kv.shape[0]])
    fig, ax = plt.subplots(figsize=(6.5, 4))
    ax.step(np.maximum(x, 2.0**-30), y, where="post", label="sessions")
    ax.set_xscale("log")
    ax.set_ylim(0, 1.02)
    ax.set_xlabel(f"session KV (GiB, {result.kv.model})")
    ax.set_ylabel("share of sessions")
    ax.axvline(
        FLAT_SESSION_KV_P90_BYTES / 2**30,
        color="grey",
        linestyle="--",
        linewidth=1,
        label="flat-layout threshold (p90 >= 1 GiB)",
    )
    ax.legend(loc="best", framealpha=0.9)
    inferred = " (inferred sessions)" if result.sessions.inferred else ""
    ax.set_title(f"Session KV size CDF{inferred}")
    ax.grid(True, alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def memory_tier_curve(result: AnalysisResult, path: Path) -> bool:
    """LRU hit share against memory capacity, with the ideal (infinite cache) line."""
    if result.tables.hit_curve_capacity_blocks.shape[0] == 0 or not result.kv.block_bytes:
        return False
    plt = _pyplot()
    cap_gib = result.tables.hit_curve_capacity_blocks * result.kv.block_bytes / 2**30
    share = result.tables.hit_curve_share
    pts = [p for p in result.memory_tier if p.lru_hit_share is not None]
    widest = max((p.capacity_bytes / 2**30 for p in pts), default=0.0)
    if widest > cap_gib[-1]:
        # Past the largest stack distance the curve is flat: draw it out to every analysed dot.
        cap_gib = np.append(cap_gib, widest)
        share = np.append(share, share[-1])
    fig, ax = plt.subplots(figsize=(6.5, 4))
    ax.plot(cap_gib, share, label="LRU hit share")
    if result.reuse and result.reuse.reuse_access_share is not None:
        ax.axhline(
            result.reuse.reuse_access_share,
            color="grey",
            linestyle="--",
            label="ideal (reuse access share)",
        )
    ax.scatter(
        [p.capacity_bytes / 2**30 for p in pts],
        [p.lru_hit_share for p in pts],
        color="C1",
        zorder=3,
        label="analysed capacities",
    )
    ax.set_xscale("log")
    ax.set_ylim(0, 1.02)
    ax.set_xlabel(f"memory capacity (GiB, {result.kv.model})")
    ax.set_ylabel("share of block accesses")
    ax.set_title("Memory-tier hit curve")
    ax.grid(True, alpha=0.3)
    ax.legend(loc="best", framealpha=0.9)  # the curve sits low or high by trace
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True
