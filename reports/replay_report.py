"""``fcctl replay`` output: the rich table (policies x rates), ``--out`` files and PNG charts.

matplotlib is imported only when charts are written (Agg backend, via ``reports.charts``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console
from rich.table import Table

from fcctl.analyzers.replay import sampled_label, verdict_sentences
from fcctl.analyzers.replay.achieved import load_label
from fcctl.analyzers.replay.result import RateResult, ReplayResult
from fcctl.common.jsonio import write_json_file
from fcctl.common.outdir import atomic_out_dir, check_out_dir

from . import format as fmt
from .console import print_rendered
from .shares import CELL_LEGEND, hit_cell, ideal_line

OUT_MARKER = "replay.json"


def _table(result: ReplayResult) -> Table:
    t = Table(title="fcctl replay: reused blocks delivered to the GPU before prefill")
    for col in (
        "load",
        "got/s",
        "policy",
        "prefill",
        "SSD",
        "GPU hit",
        "TTFT s",
        "p99",
        "SSD read",
        "amp.",
        "prefetch s",
        "p99",
        "cancel",
        "recomp. tok",
    ):
        t.add_column(col, justify="left" if col in ("policy",) else "right")
    for rate in result.rates:
        for name, p in rate.policies.items():
            u = p.utilisation
            t.add_row(
                _load_cell(rate),
                fmt.sig3(p.achieved_rate.central, "-") + saturation_mark(p.saturated_by),
                name,
                f"{fmt.share(u.prefill_mean)}/{fmt.share(u.prefill_max)}",
                fmt.share(u.ssd_read),
                hit_cell(p),
                fmt.sig3(p.ttft_s.mean, "-"),
                fmt.sig3(p.ttft_s.p99, "-"),
                fmt.size_2dp(p.ssd_read_bytes),
                fmt.fixed2(p.read_amplification, "-"),
                fmt.sig3(p.prefetch_s.mean, "-"),
                fmt.sig3(p.prefetch_s.p99, "-"),
                f"{p.cancelled_prefetches:,}",
                f"{p.recomputed_tokens:,}",
            )
    return t


#: What the served-rate column and its marks mean (docs/simulator.md 6.1), the one wording of
#: the terminal table and the report page.
SATURATION_LEGEND = (
    "requests served per second in the steady-state window (arrivals 10-90 %), * "
    "saturated by the node (more than 10 % below the part of the offered load that ran "
    "(rejected requests excluded): the offered rate, or on one clock the rate arriving in "
    "the window, times the share of the window's arrivals that ran), ~ held "
    "back by the trace's own turn gaps (an instant node would not reach it either)"
)


def saturation_mark(saturated_by: str | None) -> str:
    """``*``: the node cannot serve the offered load; ``~``: the trace's pacing cannot offer it
    (the JSON's ``saturated_by``, set exactly when ``saturated`` is)."""
    return {"node": "*", "trace-pacing": "~"}.get(saturated_by or "", "")


def _load_cell(point: RateResult) -> str:
    return f"{point.rate:.3g}" if point.rate is not None else f"c={point.concurrency:,}"


def decision_lines(result: ReplayResult) -> list[str]:
    """One line per load point, the decision first (docs/simulator.md, "The decision")."""
    lines = []
    for rate in result.rates:
        d = rate.decision
        achieved = [p.achieved_rate.central for p in rate.policies.values()]
        got = [a for a in achieved if a is not None]
        spread = (
            f"; the policies served {fmt.sig3(min(got))}-{fmt.sig3(max(got))} req/s"
            if len(got) > 1 and min(got) != max(got)
            else ""
        )
        lines.append(f"at {load_label(rate)}{spread}: {d.best} ({d.why})")
    m = result.decision_margins
    if result.load.get("axis") == "concurrency":
        div = result.divergence_concurrency
        name, shown = "concurrency", None if div is None else f"{div:,} sessions"
    else:
        div_rate = result.divergence_rate
        name, shown = "rate", None if div_rate is None else f"{div_rate:.3g} req/s"
    lines.append(
        f"divergence {name}: "
        + ("none (no load run shows a lead)" if shown is None else shown)
        + f" (the lowest load at which one layout leads by more than {m['margin_pp']:g} pp of "
        f"GPU hit share or {100 * m['ttft_margin']:g} % of mean TTFT)"
    )
    return lines


#: Why a request never ran (analyzers/replay/engine.REJECT_REASONS), in words, and the flags
#: that change how many do.
REJECT_WORDS = {
    "exceeds_max_context": "longer than the model's context",
    "kv_exceeds_gpu_pool": "larger than one worker's GPU KV pool",
}
REJECT_FLAGS = {
    "exceeds_max_context": "--model or --model-config",
    "kv_exceeds_gpu_pool": "--gpu-kv, --gpus, --tp or --hardware",
}
#: Above this share of requests rejected, plan's decision says its figures exclude them.
REJECTED_SHARE_STATED = 0.05


@dataclass(frozen=True)
class RejectedShare:
    """The requests a replay never ran, of all its ``requests``, by reason."""

    rejected: int
    requests: int
    reasons: Mapping[str, int]

    @property
    def share(self) -> float:
        return self.rejected / self.requests if self.requests else 0.0

    def line(self) -> str:
        """One line: the share, each reason with its count and the flag that changes it."""
        parts = [
            f"{n:,} {REJECT_WORDS.get(r, r)} (change with {REJECT_FLAGS.get(r, '--model')})"
            for r, n in sorted(self.reasons.items())
        ]
        return (
            f"rejected: {100 * self.share:.3g} % of requests ({self.rejected:,} of "
            f"{self.requests:,}) never ran: {'; '.join(parts)}; their TTFT is not counted; hit "
            "shares are over the requests that ran, and over all with their blocks as misses"
        )


def rejected_share(result: ReplayResult) -> RejectedShare | None:
    """The requests the replay rejected (at its operating point, else its first load point:
    the reasons depend on the model and the GPU pool, not on the load); None when none were."""
    point = result.operating_point or (result.rates[0] if result.rates else None)
    if point is None:
        return None
    policy = max(point.policies.values(), key=lambda p: p.rejected_requests.count, default=None)
    if policy is None or policy.rejected_requests.count == 0:
        return None
    r = policy.rejected_requests
    return RejectedShare(r.count, policy.requests, dict(r.reasons))


def render_summary(result: ReplayResult, console: Console) -> None:
    amplify = result.load.get("amplify", 1)
    if amplify != 1:
        console.print(f"amplified {amplify}x: {result.trace.sessions:,} sessions", highlight=False)
    if result.decision is not None:  # the run's one decision first; per-load ones are detail
        console.print(verdict_sentences(result.decision), highlight=False)
    # What the figures exclude belongs in the first lines (issue #33 item 4): right under the
    # decision, before the per-load detail.
    rejected = rejected_share(result)
    if rejected is not None:
        console.print(rejected.line(), highlight=False)
    for line in decision_lines(result):
        console.print(f"decision {line}")
    tr = result.trace
    hw = result.hardware
    scope = ""
    if hw.get("host_scope", {}).get("value") == "worker":
        share = hw["host_memory_bytes"]["value"] // max(result.workers, 1)
        scope = f" (host memory per worker: {fmt.size_2dp(share)} each)"
    console.print(
        f"trace {tr.path} ({tr.format}): {tr.requests:,} requests, {tr.block_accesses:,} block "
        f"accesses; {result.workers} workers on {hw['name']}{scope}; model "
        f"{result.kv.model}, {fmt.size_2dp(result.kv.block_bytes)} per block"
    )
    label = sampled_label(result.sampling)
    if label:
        console.print(label)
    every = [p for r in result.rates for p in r.policies.values()]
    console.print(ideal_line(every, result.ideal_hit_share))
    console.print(_table(result))
    console.print(
        f"got/s: {SATURATION_LEGEND}; prefill: busy share of "
        "the span, mean/busiest worker; SSD: share of the span the read link is busy; TTFT over "
        "the window"
    )
    if any(p.rejected_requests.count for p in every):
        console.print(CELL_LEGEND)
    for note in result.notes:
        console.print(f"note: {note}")


def print_summary(result: ReplayResult) -> None:
    """The summary on stdout; piped output loses rich's padding at the line ends."""
    # A pipe: the whole table, one line per row.
    print_rendered(lambda console: render_summary(result, console))


def check_replay_out_dir(out: Path, *, force: bool) -> None:
    check_out_dir(out, force=force, marker=OUT_MARKER, command="replay")


def _charts(result: ReplayResult, d: Path) -> list[str]:
    from .charts import load_pyplot, save_figure

    plt = load_pyplot()
    by_concurrency = result.load.get("axis") == "concurrency"
    rates = [r.concurrency if by_concurrency else r.rate for r in result.rates]
    xlabel = "sessions active" if by_concurrency else "offered rate (requests/s)"
    names = list(result.rates[0].policies) if result.rates else []
    fig, ax = plt.subplots(figsize=(6, 4))
    for n in names:
        ax.plot(
            rates,
            [100 * (r.policies[n].gpu_hit_share_served or 0) for r in result.rates],
            marker="o",
            label=n,
        )
    if result.ideal_hit_share is not None:
        ax.axhline(100 * result.ideal_hit_share, color="grey", linestyle="--", label="ideal")
    ax.set_xlabel(xlabel)
    ax.set_ylabel("reused blocks delivered to GPU (% of accesses)")
    ax.legend()
    save_figure(fig, d / "hit_share.png")
    plt.close(fig)
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for ax, q in zip(axes, ("p50", "p99"), strict=True):
        for n in names:
            ax.plot(
                rates,
                [getattr(r.policies[n].ttft_s, q) or 0 for r in result.rates],
                marker="o",
                label=n,
            )
        ax.set_xlabel(xlabel)
        ax.set_ylabel(f"TTFT {q} (s)")
        ax.legend()
    save_figure(fig, d / "ttft.png")
    plt.close(fig)
    return ["hit_share.png", "ttft.png"]


def _size_token(n: int) -> str:
    """A size for a file name: whole TiB, GiB or MiB when it is one, else bytes."""
    for unit, shift in (("TiB", 40), ("GiB", 30), ("MiB", 20)):
        if n and n % (1 << shift) == 0:
            return f"{n >> shift}{unit}"
    return f"{n}B"


def _size_suffixes(result: ReplayResult) -> list[str]:
    """Per load point, ``-<size><value>`` for each size that differs between the points (a
    ``--staging 16GiB,1TiB`` sweep), so no two points' tables share a file; empty otherwise."""
    keys = sorted({k for point in result.rates for k in point.sizes})
    varying = [k for k in keys if len({point.sizes.get(k) for point in result.rates}) > 1]
    short = {"gpu_kv_bytes": "gpu", "host_memory_bytes": "host", "staging_bytes": "staging"}
    return [
        "".join(
            f"-{short.get(k, k)}{_size_token(point.sizes[k])}"
            for k in varying
            if point.sizes.get(k) is not None
        )
        for point in result.rates
    ]


def write_out_dir(result: ReplayResult, out: Path, *, force: bool = False) -> list[str]:
    """``replay.json``, ``requests-<policy>-rate<rate>[-<size>...].parquet`` per cell (the
    sizes named when a size list made several points of one load), two charts."""
    with atomic_out_dir(out, force=force, marker=OUT_MARKER, command="replay") as d:
        write_json_file(result, d / OUT_MARKER)
        names = [OUT_MARKER]
        for rate, suffix in zip(result.rates, _size_suffixes(result), strict=True):
            for name, p in rate.policies.items():
                if p.table is not None:
                    load = f"rate{rate.rate:g}" if rate.rate is not None else f"c{rate.concurrency}"
                    fname = f"requests-{name}-{load}{suffix}.parquet"
                    if fname in names:  # never one table over another
                        raise RuntimeError(f"two load points would both write {fname}")
                    p.table.write_parquet(d / fname)
                    names.append(fname)
        names += _charts(result, d)
    return names
