"""The share of a trace's requests each model preset rejects for its context length.

A request (prompt + output tokens) longer than a model's context (``max_position_embeddings``
of its preset) is never served. This prints, for every model preset, how many requests of the
trace are longer than its context, and the trace's longest request: the figures docs/analyze.md
quotes in its model preset table.

    python3 benchmarks/model_context_shares.py \
        ../shared/traces/weka_kv_cache_tester/claude_code_traces.jsonl.gz
"""

from __future__ import annotations

import argparse


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("trace", help="a trace file fcctl reads")
    args = parser.parse_args()

    import fcctl
    from fcctl.layout.geometry import model_geometry, preset_names

    requests = fcctl.read_trace(args.trace).requests
    total = requests["input_tokens"] + requests["output_tokens"]
    n = requests.height
    longest = int(total.to_numpy().max()) if n else 0
    print(f"{args.trace}: {n:,} requests; the longest is {longest:,} tokens (prompt + output)")
    for name in preset_names():
        info = model_geometry(name).info
        context = info.max_context_tokens if info is not None else 0
        over = int((total > context).sum()) if context else 0
        print(f"{name:18} context {context:>9,}: {over:>6,} rejected ({100 * over / n:.1f} %)")


if __name__ == "__main__":
    main()
