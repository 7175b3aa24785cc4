"""``fcctl recommend-thresholds`` output: the summary, the misplacement sentences, ``--out`` files.

``--out DIR``: ``recommend.json`` (the ``--json`` document), ``thresholds.toml``, Parquet tables
(``grid.parquet``, ``rates.parquet``, ``misplacement.parquet``) and PNG charts
(``grid_hit_share.png``, ``grid_ttft_p99.png``: heat maps over the threshold grid at the target
rate; ``hit_share.png``, ``ttft_p99.png``: against rate per policy). matplotlib is imported only
when charts are written (Agg backend, via ``reports.charts``).
"""

from __future__ import annotations

from pathlib import Path

import polars as pl
from rich.console import Console
from rich.table import Table

from fcctl.analyzers.recommend import RecommendResult, thresholds_toml
from fcctl.analyzers.recommend.result import Misplacement
from fcctl.analyzers.replay import sampled_label
from fcctl.common.jsonio import write_json_file
from fcctl.common.outdir import atomic_out_dir, check_out_dir
from fcctl.common.units import format_bytes

from . import format as fmt
from .console import print_rendered
from .shares import CELL_LEGEND, hit_cell, ideal_line

OUT_MARKER = "recommend.json"


def _signed_ms(seconds: float) -> str:
    """``+12 ms`` / ``-3 ms``; a change under half a millisecond is ``+0 ms`` (never ``-0``)."""
    return f"{round(1000 * seconds):+,d} ms"


def misplacement_sentence(result: RecommendResult, m: Misplacement) -> str:
    """One sentence: what ``m`` costs against the recommendation, at the target rate."""
    rec = result.recommendation
    short, agent = f"{m.short_reply_tokens:,}", f"{m.agent_context_tokens:,}"
    what = {
        "short_reply_tokens halved": f"halving the short-reply threshold (to {short})",
        "short_reply_tokens doubled": f"doubling the short-reply threshold (to {short})",
        "agent_context_tokens halved": f"halving the agent-context threshold (to {agent})",
        "agent_context_tokens doubled": f"doubling the agent-context threshold (to {agent})",
        "every short chat on SSD": "placing every short chat on SSD",
        "every session in memory": "placing every session's later turns in memory",
    }.get(m.change, m.change)
    lead = f"{what[0].upper()}{what[1:]}"
    if m.ttft_s.p99 is not None and rec.ttft_s.p99 is not None:
        d = m.ttft_s.p99 - rec.ttft_s.p99
        lead += f" {'costs' if d >= 0 else 'saves'} {abs(1000 * d):,.0f} ms p99 TTFT"
    parts = []
    if m.ttft_s.mean is not None and rec.ttft_s.mean is not None:
        parts.append(f"{_signed_ms(m.ttft_s.mean - rec.ttft_s.mean)} mean TTFT")
    if m.gpu_hit_share is not None and rec.gpu_hit_share is not None:
        parts.append(f"{100 * (m.gpu_hit_share - rec.gpu_hit_share):+.2f} points of GPU hit share")
    base = next(
        g.ssd_read_bytes
        for g in result.grid
        if (g.short_reply_tokens, g.agent_context_tokens, g.rate)
        == (rec.short_reply_tokens, rec.agent_context_tokens, rec.rate)
    )
    d_ssd = m.ssd_read_bytes - base
    parts.append(f"{'+' if d_ssd >= 0 else '-'}{format_bytes(abs(d_ssd))} SSD reads")
    return f"{lead} ({', '.join(parts)}) at {rec.rate:g} req/s."


def _grid_table(result: RecommendResult) -> Table:
    rec = result.recommendation
    cells = [g for g in result.grid if g.rate == rec.rate]
    agents = sorted({g.agent_context_tokens for g in cells})
    shorts = sorted({g.short_reply_tokens for g in cells})
    t = Table(
        title=f"flat at {rec.rate:g} req/s: GPU hit share / p99 TTFT (rows: short-reply "
        "threshold, columns: agent-context threshold; * = recommended)"
    )
    t.add_column("short \\ agent", justify="right")
    for a in agents:
        t.add_column(f"{a:,}", justify="right")
    by = {(g.short_reply_tokens, g.agent_context_tokens): g for g in cells}
    for s in shorts:
        row = [f"{s:,}"]
        for a in agents:
            g = by[(s, a)]
            mark = "*" if (s, a) == (rec.short_reply_tokens, rec.agent_context_tokens) else ""
            row.append(f"{mark}{fmt.share(g.gpu_hit_share)} / {fmt.seconds(g.ttft_s.p99)}")
        t.add_row(*row)
    return t


def _rates_table(result: RecommendResult) -> Table:
    t = Table(title="baselines and the recommendation at every rate (flat, flat-fcfs: recommended)")
    for col in ("rate/s", "policy", "GPU hit", "TTFT mean", "p99", "SSD read", "cancelled"):
        t.add_column(col, justify="left" if col == "policy" else "right")
    for r in result.rates:
        for name, p in r.policies.items():
            t.add_row(
                f"{r.rate:g}",
                name,
                hit_cell(p),
                fmt.seconds(p.ttft_s.mean),
                fmt.seconds(p.ttft_s.p99),
                fmt.size(p.ssd_read_bytes),
                f"{p.cancelled_prefetches:,}",
            )
    return t


def render_summary(result: RecommendResult, console: Console) -> None:
    f = result.facts
    rec = result.recommendation
    if f.amplify != 1:
        console.print(f"amplified {f.amplify}x: {f.sessions:,} sessions", highlight=False)
    console.print(
        f"trace {f.trace_path} ({f.trace_format}): {f.requests:,} requests, {f.sessions:,} "
        f"sessions{' (inferred)' if f.sessions_inferred else ''}, {f.later_turns:,} later "
        f"turns; model {f.model} on {f.hardware_name}; grid {f.grid_rule}; "
        f"{f.simulations_run} simulations ({f.simulations_reused} reused)"
    )
    label = sampled_label(result.sampling)
    if label:
        console.print(label)
    console.print(_grid_table(result))
    console.print(_rates_table(result))
    every = [p for r in result.rates for p in r.policies.values()]
    if any(p.rejected_requests.count for p in every):
        console.print(CELL_LEGEND)
    console.print(ideal_line(every, result.ideal_hit_share))
    console.print(
        f"recommended: short reply <= {rec.short_reply_tokens:,} tokens, agent context > "
        f"{rec.agent_context_tokens:,} tokens (objective {f.objective}, at {rec.rate:g} req/s): "
        f"GPU hit share {fmt.share(rec.gpu_hit_share)}, TTFT mean "
        f"{fmt.seconds(rec.ttft_s.mean)}, p99 {fmt.seconds(rec.ttft_s.p99)}"
    )
    sp = rec.spread
    spread = (
        f"{sp.pairs} pairs at {rec.rate:g} req/s span "
        f"{'n/a' if sp.hit_share_pp is None else f'{sp.hit_share_pp:.2f}'} pp of GPU hit share "
        f"and x{'n/a' if sp.ttft_mean_ratio is None else f'{sp.ttft_mean_ratio:.3f}'} of mean "
        f"TTFT (margins {sp.margin_pp:g} pp, {100 * sp.ttft_margin:g} %)"
    )
    if rec.matters:
        console.print(f"the thresholds matter: {spread}; {rec.why}")
    else:
        console.print(
            f"the thresholds do not matter here: {spread}; the default pair is "
            "recommended (and emitted with --emit)"
        )
    console.print("misplacement cost:")
    for m in result.misplacement:
        console.print(f"  {misplacement_sentence(result, m)}")
    for note in f.notes:
        console.print(f"note: {note}")


def print_summary(result: RecommendResult) -> None:
    """The summary on stdout; piped output gets whole lines without rich's padding."""
    print_rendered(lambda console: render_summary(result, console))


def check_recommend_out_dir(out: Path, *, force: bool) -> None:
    check_out_dir(out, force=force, marker=OUT_MARKER, command="recommend-thresholds")


def tables(result: RecommendResult) -> dict[str, pl.DataFrame]:
    """The Parquet tables of ``--out``: one row per grid cell, per (rate, policy), per change."""
    grid = pl.DataFrame(
        [
            {
                "short_reply_tokens": g.short_reply_tokens,
                "agent_context_tokens": g.agent_context_tokens,
                "rate_per_s": g.rate,
                "gpu_hit_share": g.gpu_hit_share,
                "ttft_mean_s": g.ttft_s.mean,
                "ttft_p99_s": g.ttft_s.p99,
                "ssd_read_bytes": g.ssd_read_bytes,
            }
            for g in result.grid
        ]
    )
    rates = pl.DataFrame(
        [
            {
                "rate_per_s": r.rate,
                "policy": n,
                "gpu_hit_share": p.gpu_hit_share,
                "ttft_mean_s": p.ttft_s.mean,
                "ttft_p50_s": p.ttft_s.p50,
                "ttft_p99_s": p.ttft_s.p99,
                "ssd_read_bytes": p.ssd_read_bytes,
                "cancelled_prefetches": p.cancelled_prefetches,
                "recomputed_tokens": p.recomputed_tokens,
            }
            for r in result.rates
            for n, p in r.policies.items()
        ]
    )
    mis = pl.DataFrame(
        [
            {
                "change": m.change,
                "short_reply_tokens": m.short_reply_tokens,
                "agent_context_tokens": m.agent_context_tokens,
                "rate_per_s": result.recommendation.rate,
                "gpu_hit_share": m.gpu_hit_share,
                "ttft_mean_s": m.ttft_s.mean,
                "ttft_p99_s": m.ttft_s.p99,
                "ssd_read_bytes": m.ssd_read_bytes,
            }
            for m in result.misplacement
        ]
    )
    return {"grid.parquet": grid, "rates.parquet": rates, "misplacement.parquet": mis}


def _charts(result: RecommendResult, d: Path) -> list[str]:
    import numpy as np

    from .charts import load_pyplot, save_figure

    plt = load_pyplot()
    rec = result.recommendation
    cells = [g for g in result.grid if g.rate == rec.rate]
    shorts = sorted({g.short_reply_tokens for g in cells})
    agents = sorted({g.agent_context_tokens for g in cells})
    by = {(g.short_reply_tokens, g.agent_context_tokens): g for g in cells}
    written = []
    for fname, title, value in (
        ("grid_hit_share.png", "GPU hit share (%)", lambda g: 100 * (g.gpu_hit_share or 0)),
        ("grid_ttft_p99.png", "p99 TTFT (s)", lambda g: g.ttft_s.p99 or 0.0),
    ):
        z = np.array([[value(by[(s, a)]) for a in agents] for s in shorts], dtype=float)
        fig, ax = plt.subplots(figsize=(1.6 + 1.1 * len(agents), 1.4 + 0.6 * len(shorts)))
        im = ax.imshow(z, origin="lower", aspect="auto", cmap="viridis")
        ax.set_xticks(range(len(agents)), [f"{a:,}" for a in agents], rotation=30)
        ax.set_yticks(range(len(shorts)), [f"{s:,}" for s in shorts])
        ax.set_xlabel("agent-context threshold (tokens)")
        ax.set_ylabel("short-reply threshold (tokens)")
        for i in range(len(shorts)):
            for j in range(len(agents)):
                ax.text(j, i, f"{z[i, j]:.3g}", ha="center", va="center", color="w", fontsize=8)
        ri, rj = shorts.index(rec.short_reply_tokens), agents.index(rec.agent_context_tokens)
        ax.add_patch(plt.Rectangle((rj - 0.5, ri - 0.5), 1, 1, fill=False, ec="red", lw=2))
        ax.set_title(f"{title}, flat at {rec.rate:g} req/s (red: recommended)")
        fig.colorbar(im, ax=ax)
        save_figure(fig, d / fname)
        plt.close(fig)
        written.append(fname)
    rates = [r.rate for r in result.rates]
    names = list(result.rates[0].policies) if result.rates else []
    for fname, ylabel, value in (
        (
            "hit_share.png",
            "GPU hit share (% of block accesses)",
            lambda p: 100 * (p.gpu_hit_share or 0),
        ),
        ("ttft_p99.png", "p99 TTFT (s)", lambda p: p.ttft_s.p99 or 0.0),
    ):
        fig, ax = plt.subplots(figsize=(6, 4))
        for n in names:
            ax.plot(rates, [value(r.policies[n]) for r in result.rates], marker="o", label=n)
        if fname == "hit_share.png" and result.ideal_hit_share is not None:
            ax.axhline(100 * result.ideal_hit_share, color="grey", linestyle="--", label="ideal")
        ax.set_xlabel("rate (requests/s)")
        ax.set_ylabel(ylabel)
        ax.legend()
        save_figure(fig, d / fname)
        plt.close(fig)
        written.append(fname)
    return written


def write_out_dir(result: RecommendResult, out: Path, *, force: bool = False) -> list[str]:
    """Every ``--out`` file (module docstring), atomically; the names written."""
    with atomic_out_dir(out, force=force, marker=OUT_MARKER, command="recommend-thresholds") as d:
        write_json_file(result, d / OUT_MARKER)
        (d / "thresholds.toml").write_text(thresholds_toml(result))
        names = [OUT_MARKER, "thresholds.toml"]
        for fname, frame in tables(result).items():
            frame.write_parquet(d / fname)
            names.append(fname)
        names += _charts(result, d)
    return names
