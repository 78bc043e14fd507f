"""``fleetgym docs``: builds the site from a checkout, and says clearly when there is none."""

from __future__ import annotations

from pathlib import Path

import pytest

from fleetgym.cli import main
from fleetgym.experiments import docs


def test_without_sources_it_says_to_use_a_checkout(tmp_path: Path, capsys) -> None:
    status = main(["docs", "--source", str(tmp_path / "nowhere"), "--out", str(tmp_path / "o")])
    assert status == 2
    err = capsys.readouterr().err
    assert "checkout" in err and "--source" in err and 'pip install -e ".[docs]"' in err
    assert not (tmp_path / "o").exists()


@pytest.mark.skipif(
    not (docs.default_source() / "conf.py").is_file(),
    reason="fleetgym is installed from a wheel here (no docs/ next to the package)",
)
def test_the_default_source_is_the_checkouts_docs() -> None:
    assert docs.default_source().name == "docs"
