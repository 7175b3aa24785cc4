"""PNG charts for ``fcctl analyze --out``. matplotlib is imported here only (Agg backend)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from fcctl.common.units import format_bytes

if TYPE_CHECKING:
    from fcctl.analyzers.reuse.analyze import AnalysisResult


def load_pyplot() -> Any:
    """matplotlib.pyplot on the file-only Agg backend, imported on first use."""
    try:
        import matplotlib
    except ImportError as e:  # pragma: no cover - core dependency
        raise RuntimeError("charts need matplotlib: pip install 'matplotlib>=3.7'") from e
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _drawable(text: str) -> str:
    """``text`` with the characters the chart font has no glyph for written as ``\\uXXXX``.

    matplotlib would draw them as boxes and warn once per character (a CJK trace name gave 9
    warnings on stderr); an escape keeps the name readable and exact, and warns nobody.
    """
    from matplotlib import font_manager

    font = font_manager.get_font(font_manager.findfont(font_manager.FontProperties()))
    return "".join(
        c if c.isascii() or font.get_char_index(ord(c)) else ascii(c)[1:-1] for c in text
    )


def save_figure(fig: Any, path: Path) -> None:
    """Write ``fig`` to ``path`` (PNG, tight layout), quiet about glyphs the font lacks."""
    import warnings

    with warnings.catch_warnings():
        # Any glyph still missing (a label we did not escape) is drawn as a box; not news.
        warnings.filterwarnings("ignore", message=r"Glyph .* missing from")
        fig.tight_layout()
        fig.savefig(path, dpi=110)


def _sampled_label(result: AnalysisResult) -> str:
    """`` (stack distances sampled, SHARDS R=...)`` for a bounded analysis, else nothing."""
    sampling = result.trace.sampling
    if sampling is None:
        return ""
    return f" (LRU stack sampled: SHARDS R={sampling.rate:g})"


def reuse_distance_cdf(result: AnalysisResult, path: Path) -> bool:
    """CDF of reuse distance: stack distance (bytes), requests, seconds. False if no reuse."""
    cdf = result.tables.cdf
    if cdf.height == 0:
        return False
    plt = load_pyplot()
    panels = [
        ("stack_bytes", _drawable(f"LRU stack distance (GiB of KV, {result.kv.model})")),
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
    fig.suptitle(
        _drawable(f"Reuse distance CDF: {Path(result.trace.path).name}{_sampled_label(result)}")
    )
    save_figure(fig, path)
    plt.close(fig)
    return True


def session_kv_cdf(result: AnalysisResult, path: Path) -> bool:
    """CDF of per-session KV bytes. False when the trace has no sessions."""
    if result.sessions is None or result.sessions.count == 0:
        return False
    plt = load_pyplot()
    from fcctl.analyzers.reuse.verdict import CHECK_SESSION_KV_P90, FLAT_SESSION_KV_P90_BYTES

    # The threshold the verdict used (--flat-session-kv), not the library default.
    limit = next(
        (c.threshold for c in result.verdict.checks if c.name == CHECK_SESSION_KV_P90),
        None,
    )
    limit = float(limit if limit is not None else FLAT_SESSION_KV_P90_BYTES)
    kv = np.sort(result.sessions.table["kv_bytes"].to_numpy().astype(np.float64))
    # The empirical CDF starts at 0 just left of the smallest session, then steps up.
    x = np.concatenate([kv[:1], kv]) / 2**30
    y = np.concatenate([[0.0], np.arange(1, kv.shape[0] + 1) / kv.shape[0]])
    fig, ax = plt.subplots(figsize=(6.5, 4))
    ax.step(np.maximum(x, 2.0**-30), y, where="post", label="sessions")
    ax.set_xscale("log")
    ax.set_ylim(0, 1.02)
    ax.set_xlabel(_drawable(f"session KV, distinct blocks (GiB, {result.kv.model})"))
    ax.set_ylabel("share of sessions")
    ax.axvline(
        limit / 2**30,
        color="grey",
        linestyle="--",
        linewidth=1,
        label=f"flat-layout threshold (p90 >= {format_bytes(limit)})",
    )
    ax.legend(loc="best", framealpha=0.9)
    inferred = " (inferred sessions)" if result.sessions.inferred else ""
    ax.set_title(f"Session KV size CDF{inferred}")
    ax.grid(True, alpha=0.3)
    save_figure(fig, path)
    plt.close(fig)
    return True


def memory_tier_curve(result: AnalysisResult, path: Path) -> bool:
    """LRU hit share against memory capacity, with the ideal (infinite cache) line."""
    if result.tables.hit_curve_capacity_blocks.shape[0] == 0 or not result.kv.block_bytes:
        return False
    plt = load_pyplot()
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
    ax.set_xlabel(_drawable(f"memory capacity (GiB, {result.kv.model})"))
    ax.set_ylabel("share of block accesses")
    ax.set_title("Memory-tier hit curve" + _sampled_label(result))
    ax.grid(True, alpha=0.3)
    ax.legend(loc="best", framealpha=0.9)  # the curve sits low or high by trace
    save_figure(fig, path)
    plt.close(fig)
    return True
