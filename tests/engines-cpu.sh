#!/usr/bin/env bash
# The engines the adapter tests run against (fcctl's extra [engines]), on a CPU-only machine:
# a venv over the system site-packages (torch's CPU build and fcctl's own dependencies come
# from there), the three engine wheels without their CUDA dependencies, and what their
# interface modules import. Then:
#   PYTHONPATH=$PWD VENV/bin/python -m pytest -q -rs tests/test_engine_*.py
set -euo pipefail
VENV=${1:-/work/venv-engines}
python3 -m venv --system-site-packages "$VENV"
"$VENV/bin/pip" install -q --no-deps lmcache==0.5.6 sglang==0.5.23 vllm==0.34.0 triton
"$VENV/bin/pip" install -q pybase64 cachetools msgspec blake3 pyzmq cbor2 setproctitle aiofile \
    aiofiles prometheus_client tqdm aiohttp transformers starlette
