"""Sphinx configuration of the gnnsys documentation site (pages in Markdown via MyST).

Build: `sphinx-build -W --keep-going -b html docs build/docs` (what .ci/run runs).
"""

from importlib.metadata import version as _version

project = "gnnsys"
author = "gnnsys developers"
release = _version("gnnsys")
version = release

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.napoleon",
    "sphinxcontrib.mermaid",
]

# Public docstrings give their parameters in Google style (Args:, Returns:, Raises:), rendered as field lists.
napoleon_google_docstring = True
napoleon_numpy_docstring = False

source_suffix = {".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build"]

# Headings become link targets, so pages can link to "page.md#a-section".
myst_heading_anchors = 3
myst_enable_extensions = ["colon_fence"]
# ```mermaid fences (GitHub draws them too) become diagrams.
myst_fence_as_directive = ["mermaid"]

# Docstrings quote names as `name`: render them as code, as the Markdown pages do.
default_role = "code"

autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_default_options = {"members": True, "show-inheritance": False}
autosummary_generate = False

html_theme = "furo"
html_title = f"gnnsys {release}"
