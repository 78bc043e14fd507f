"""``fleetgym docs``: build the documentation site (Sphinx, furo, MyST) and open or serve it.

The site is built from the sources in the repository's ``docs/`` folder (the guides, the
results, ``conf.py``) and from the docstrings of the installed package, so the command works
from a checkout (``pip install -e ".[docs]"``); an installed wheel carries no ``docs/``
folder, and the command says so (``--source`` points it at a checkout's ``docs/``).
"""

from __future__ import annotations

import argparse
import functools
import http.server
import subprocess
import sys
import time
import webbrowser
from pathlib import Path

from fleetgym.experiments.argtypes import (
    UsageError,
    check_output_dir,
    int_in,
    output_folder,
)
from fleetgym.extras import require

__all__ = ["build", "configure", "default_source", "run"]

#: The docs/ folder of the checkout this package was imported from (the repository root is
#: the package).
DEFAULT_SOURCE = Path(__file__).resolve().parents[1] / "docs"


def default_source() -> Path:
    """The ``docs/`` folder next to the package: present in a checkout, absent in a wheel."""
    return DEFAULT_SOURCE


def configure(parser: argparse.ArgumentParser) -> None:
    """Add this subcommand's arguments (imports nothing heavy)."""
    parser.add_argument(
        "--out",
        type=output_folder,
        default=Path("fleetgym-out/docs"),
        help="folder the HTML site is written to (default: fleetgym-out/docs)",
    )
    parser.add_argument(
        "--source",
        type=Path,
        default=None,
        help="the docs/ folder of a fleetgym checkout (default: the one next to the package)",
    )
    parser.add_argument(
        "--strict", action="store_true", help="fail on any warning (sphinx-build -W, as CI)"
    )
    parser.add_argument("--open", action="store_true", help="open the built site in a browser")
    parser.add_argument(
        "--serve",
        metavar="PORT",
        type=int_in(1, 65535),
        default=None,
        help="then serve the site on http://127.0.0.1:PORT until interrupted",
    )


def build(source: Path, out: Path, strict: bool = False) -> int:
    """Run ``sphinx-build -b html source out``; returns its exit status.

    Raises:
        DependencyNotInstalled: When Sphinx, furo or MyST is not installed (the ``docs``
            extra).
    """
    for module in ("sphinx", "myst_parser", "furo"):
        require(module, "fleetgym docs")
    command = [sys.executable, "-m", "sphinx", "-b", "html", "--keep-going", "-q"]
    if strict:
        command.append("-W")
    return subprocess.call([*command, str(source), str(out)])


def run(args: argparse.Namespace) -> int:
    """Build the site, then open and/or serve it."""
    source = (args.source or default_source()).resolve()
    if not (source / "conf.py").is_file():
        raise UsageError(
            f"--source: no documentation sources at {str(source)!r} (conf.py missing); "
            "fleetgym docs builds the site from a checkout of the repository: "
            'clone it and run pip install -e ".[docs]", or pass --source CHECKOUT/docs'
        )
    out = check_output_dir("--out", args.out).resolve()
    started = time.perf_counter()
    status = build(source, out, strict=args.strict)
    if status != 0:
        print(f"fleetgym docs: sphinx-build failed (exit status {status})", file=sys.stderr)
        return 1
    index = out / "index.html"
    print(f"built {index} in {time.perf_counter() - started:.1f} s")
    if args.open and args.serve is None:
        webbrowser.open(index.as_uri())
    if args.serve is not None:
        handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(out))
        with http.server.ThreadingHTTPServer(("127.0.0.1", args.serve), handler) as server:
            url = f"http://127.0.0.1:{server.server_address[1]}/"
            print(f"serving {url} (Ctrl-C stops)")
            if args.open:
                webbrowser.open(url)
            server.serve_forever()
    return 0
