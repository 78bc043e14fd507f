"""Sphinx configuration of the fleetgym documentation site (``fleetgym docs`` builds it).

The sources are the Markdown pages of docs/ (MyST), the docstrings (autodoc + napoleon,
Google style) and the code itself (docs/_ext/fleetgym_sphinx.py: the API pages from each
public module's ``__all__``, the environment IDs, the CLI reference).
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "_ext"))

import fleetgym  # noqa: E402
from fleetgym.extras import OPTIONAL_MODULES  # noqa: E402

# `pip install "fleetgym[docs]"` alone builds the site: an optional package that is not
# installed (torch, SB3, Ray, ...) is mocked for the whole build, as Sphinx projects do with
# autodoc_mock_imports, so the API pages document every public name from its docstring and
# signature. Installed ones are imported as they are (CI's full build shows real defaults).
_MISSING = sorted(
    name
    for name, (extra, _) in OPTIONAL_MODULES.items()
    if extra != "docs" and importlib.util.find_spec(name) is None
)
autodoc_mock_imports = _MISSING
if _MISSING:
    from sphinx.ext.autodoc.mock import MockFinder  # noqa: E402

    # The API pages' extension reads public names outside autodoc's own import: the mock
    # stays for the whole build, not only around autodoc's imports.
    sys.meta_path.insert(0, MockFinder(_MISSING))

project = "fleetgym"
author = "The fleetgym developers"
copyright = "the fleetgym developers (MIT licence)"
release = fleetgym.__version__
version = ".".join(release.split(".")[:2])

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "sphinx.ext.viewcode",
    "fleetgym_sphinx",
]
source_suffix = {".md": "markdown", ".rst": "restructuredtext"}
root_doc = "index"
exclude_patterns = ["_build", "_ext", "Thumbs.db", ".DS_Store"]

myst_heading_anchors = 6
myst_enable_extensions = ["colon_fence", "deflist"]
suppress_warnings = ["myst.header"]

autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_typehints_format = "short"
autodoc_preserve_defaults = True
autodoc_inherit_docstrings = False
autodoc_default_options = {"exclude-members": "__init__, __new__"}
napoleon_google_docstring = True
napoleon_numpy_docstring = False
napoleon_use_rtype = False

# A copy button on code blocks (the docs extra installs sphinx-copybutton); the prompts
# and outputs of doctest blocks are left out of what it copies.
try:
    import sphinx_copybutton  # noqa: F401
except ImportError:  # an older docs install: the site builds without the button
    pass
else:
    extensions.append("sphinx_copybutton")
    copybutton_prompt_text = r">>> |\.\.\. |\$ "
    copybutton_prompt_is_regexp = True

html_theme = "furo"
# A "view source" link on each page when the site's source repository is named, as a URL
# template with {filename} (the page's path under docs/); empty: no link. E.g.
# FLEETGYM_SOURCE_LINK=https://github.com/OWNER/fleetgym/blob/main/docs/{filename}
_SOURCE_LINK = os.environ.get("FLEETGYM_SOURCE_LINK", "").strip()
html_theme_options: dict[str, object] = (
    {"source_view_link": _SOURCE_LINK} if "{filename}" in _SOURCE_LINK else {}
)
html_title = f"fleetgym {release}"
html_static_path = ["_static"]
html_css_files = ["tables.css"]
html_show_sourcelink = False
