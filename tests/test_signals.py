"""fcctl.common.signals: interrupts that must not be lost."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def test_an_interrupt_landing_in_a_finalizer_is_not_lost(tmp_path: Path) -> None:
    """Python ignores an exception raised in a ``__del__`` (numba's LLVM objects free themselves
    there): a Ctrl-C whose handler ran inside one must still end the block, not vanish."""
    script = tmp_path / "sigdel.py"
    script.write_text(
        "import os, signal, sys, time\n"
        "from fcctl.common.signals import first_interrupt_raises\n"
        "class A:\n"
        "    def __del__(self):\n"
        "        os.kill(os.getpid(), signal.SIGINT)\n"
        "        time.sleep(0.2)  # the handler runs here, inside __del__\n"
        "try:\n"
        "    with first_interrupt_raises():\n"
        "        a = A()\n"
        "        del a\n"
        "        time.sleep(5)\n"
        "    sys.exit(0)\n"
        "except KeyboardInterrupt:\n"
        "    sys.exit(130)\n"
    )
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 130, done.stderr
