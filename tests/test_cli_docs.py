"""docs/cli.md is generated from --help; this test keeps it in step with the code.

Regenerate with ``UPDATE_DOCS=1 python -m pytest tests/test_cli_docs.py``.
"""

from __future__ import annotations

import os
from pathlib import Path

from typer.testing import CliRunner

from fcctl.cli import app

REPO = Path(__file__).resolve().parents[1]

CLI_DOC = REPO / "docs" / "cli.md"
HEADER = (
    "# fcctl command reference\n\n"
    "Generated from `--help` by `UPDATE_DOCS=1 python -m pytest tests/test_cli_docs.py`; "
    "a test fails when this file and the code disagree. Exit statuses, signals and what an "
    "interrupted or failed run leaves: [errors.md](errors.md).\n"
)


def _help(args: list[str]) -> str:
    result = CliRunner().invoke(app, [*args, "--help"], env={"COLUMNS": "100", "TERM": "dumb"})
    assert result.exit_code == 0, result.output
    return result.output.rstrip() + "\n"


def render_cli_doc() -> str:
    parts = [HEADER, "\n## fcctl\n\n```text\n", _help([]), "```\n"]
    for name in sorted(c.name for c in app.registered_commands):
        parts += [f"\n## fcctl {name}\n\n```text\n", _help([name]), "```\n"]
    return "".join(parts)


def test_cli_doc_matches_help() -> None:
    text = render_cli_doc()
    if os.environ.get("UPDATE_DOCS"):
        CLI_DOC.write_text(text)
    assert CLI_DOC.exists(), "docs/cli.md missing: regenerate with UPDATE_DOCS=1"
    assert CLI_DOC.read_text() == text, "docs/cli.md is stale: regenerate with UPDATE_DOCS=1"


def test_every_command_is_documented() -> None:
    names = {c.name for c in app.registered_commands}
    assert {"analyze", "convert", "iobench"} <= names
