"""Generated man pages and completions match the CLI; completion answers for real."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import PGLOCK

ROOT = Path(__file__).resolve().parents[2]


def test_man_pages_and_completions_match_the_cli() -> None:
    check = subprocess.run([sys.executable, str(ROOT / "scripts" / "gen_docs.py"), "--check"],
                           capture_output=True, text=True)
    assert check.returncode == 0, check.stderr


def test_every_command_has_a_man_page_with_an_example() -> None:
    pages = {p.name for p in (ROOT / "man").glob("pglock-*.1")}
    assert {"pglock-run.1", "pglock-init.1"} <= pages
    for name in pages:
        assert "Example:" in (ROOT / "man" / name).read_text(), name


def test_bash_completion_offers_commands_and_options() -> None:
    def complete(words: str, index: int) -> list[str]:
        env = {**os.environ, "COMP_WORDS": words, "COMP_CWORD": str(index),
               "_PGLOCK_COMPLETE": "complete_bash"}
        done = subprocess.run([PGLOCK], env=env, capture_output=True, text=True, timeout=30)
        assert done.stderr == ""
        return done.stdout.split()

    assert complete("pglock ru", 1) == ["run"]
    assert "--max-runtime" in complete("pglock run --max", 2)


@pytest.mark.skipif(shutil.which("zsh") is None, reason="zsh is not installed (.ci/run has it)")
def test_zsh_completion_installed_on_fpath_completes_at_the_first_tab(tmp_path: Path) -> None:
    """Installed as docs/operators.md says, the file is autoloaded at the first TAB of a new
    shell, which must complete then, not only register itself for the next TAB."""
    folder = tmp_path / "site-functions"
    folder.mkdir()
    shutil.copy(ROOT / "completions" / "pglock.zsh", folder / "_pglock")
    env = {**os.environ, "HOME": str(tmp_path), "TERM": "dumb",
           "PATH": f"{Path(PGLOCK).parent}{os.pathsep}{os.environ['PATH']}"}
    done = subprocess.run(["zsh", "-f", str(Path(__file__).with_name("zsh_first_tab.zsh")),
                           str(folder)], env=env, capture_output=True, text=True, timeout=120)
    assert (done.returncode, done.stdout, done.stderr) == (0, "completed\n", "")
