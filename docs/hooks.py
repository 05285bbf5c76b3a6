"""MkDocs hooks: pages generated when the site is built, never typed into docs/ and never committed, so they
cannot drift: the reference pages from the code (advisor/cli/reference.py), and the home, contributing and changelog
pages from the repository's own README.md, CONTRIBUTING.md and CHANGELOG.md (their links made relative to docs/)."""

from __future__ import annotations

import re
from pathlib import Path

from mkdocs.structure.files import File

ROOT = Path(__file__).resolve().parent.parent
FROM_ROOT = {"index.md": "README.md", "contributing.md": "CONTRIBUTING.md", "changelog.md": "CHANGELOG.md"}


def site_text(text: str) -> str:
    """A root Markdown file's text as a page of the site: ``docs/x`` links lose their folder, the root files
    become their pages.

    >>> site_text("[a](docs/cli.md) [b](CONTRIBUTING.md) ![c](docs/img/d.png)")
    '[a](cli.md) [b](contributing.md) ![c](img/d.png)'
    """
    text = re.sub(r"\]\(docs/", "](", text)
    for page, source in FROM_ROOT.items():
        text = text.replace(f"]({source})", f"]({page})")
    return text


def on_files(files, config):
    from advisor.cli.reference import cli_reference, plan_reference, traps_reference

    generated = (
        ("reference/cli.md", cli_reference()),
        ("reference/plan.md", plan_reference()),
        ("reference/traps.md", traps_reference()),
    )
    for path, text in generated:
        files.append(File.generated(config, path, content=text))
    for page, source in FROM_ROOT.items():
        files.append(File.generated(config, page, content=site_text((ROOT / source).read_text())))
    return files
