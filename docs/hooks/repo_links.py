"""MkDocs hook: links from the docs to files of the repository outside ``docs/``.

The pages link to source files the way GitHub shows them (``../../examples/x.py``), so
the links work when the Markdown is read in the repository. MkDocs only knows the files
under ``docs/``, and would report those links as broken. This hook copies each linked
repository file into the built site under ``_repo/`` (as a plain file, shown as text by
the browser) and points the link there. A link to a repository file that does not
exist stays as it is, so ``mkdocs build --strict`` still fails on it; a link to a
directory is pointed at the directory's listing page, ``_repo/<dir>/index.md``, which
this hook writes.
"""

from __future__ import annotations

import posixpath
import re
from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files

#: ``](target)`` or ``](target#anchor)`` of an inline Markdown link.
_LINK = re.compile(r"\]\((?P<target>[^)\s#]+)(?P<anchor>#[^)\s]*)?\)")

_REPO_DIR = "_repo"


def _repo_root(config: Any) -> Path:
    return Path(config["config_file_path"]).resolve().parent


def _outside_target(page_src: str, target: str, config: Any) -> Path | None:
    """The repository file or directory a relative link points at, when it lies outside
    ``docs/`` (else ``None``)."""
    if "://" in target or target.startswith(("mailto:", "/")):
        return None
    docs_dir = Path(config["docs_dir"]).resolve()
    resolved = (docs_dir / posixpath.dirname(page_src) / target).resolve()
    root = _repo_root(config)
    if resolved.is_relative_to(docs_dir) or not resolved.is_relative_to(root):
        return None
    return resolved if resolved.exists() else None


def on_files(files: Files, config: Any) -> Files:
    """Add every repository file or directory the pages link to under ``_repo/``."""
    root = _repo_root(config)
    for page_file in list(files.documentation_pages()):
        text = Path(page_file.abs_src_path or "").read_text(encoding="utf-8")
        for match in _LINK.finditer(text):
            target = _outside_target(page_file.src_uri, match["target"], config)
            if target is None:
                continue
            rel = target.relative_to(root).as_posix()
            if target.is_dir():
                _add_listing(files, config, root, target)
            else:
                _add_file(files, config, f"{_REPO_DIR}/{rel}", target)
    return files


def _add_listing(files: Files, config: Any, root: Path, directory: Path) -> None:
    """Add a directory's listing page and its files, and the same for each of its
    subdirectories (listed first, each linking to its own listing page)."""
    rel = directory.relative_to(root).as_posix()
    uri = f"{_REPO_DIR}/{rel}/index.md"
    if files.get_file_from_path(uri) is not None:
        return
    entries = sorted(p for p in directory.iterdir() if not p.name.startswith((".", "__")))
    subdirs = [p for p in entries if p.is_dir()]
    plain = [p for p in entries if p.is_file()]
    listing = [f"- [{p.name}/]({p.name}/index.md)" for p in subdirs]
    listing += [f"- [{p.name}]({p.name})" for p in plain]
    for entry in plain:
        _add_file(files, config, f"{_REPO_DIR}/{rel}/{entry.name}", entry)
    text = "\n".join(listing)
    content = f"# `{rel}/`\n\nFiles of the repository's `{rel}/`:\n\n{text}\n"
    files.append(File.generated(config, uri, content=content))
    for subdir in subdirs:
        _add_listing(files, config, root, subdir)


def _add_file(files: Files, config: Any, uri: str, source: Path) -> None:
    if files.get_file_from_path(uri) is None:
        files.append(File.generated(config, uri, abs_src_path=str(source)))


def on_page_markdown(markdown: str, page: Any, config: Any, files: Files) -> str:
    """Point links to repository files at their copies under ``_repo/``."""
    root = _repo_root(config)
    src = page.file.src_uri

    def rewrite(match: re.Match[str]) -> str:
        target = _outside_target(src, match["target"], config)
        if target is None:
            return match[0]
        rel = target.relative_to(root).as_posix()
        uri = f"{_REPO_DIR}/{rel}/index.md" if target.is_dir() else f"{_REPO_DIR}/{rel}"
        new = posixpath.relpath(uri, posixpath.dirname(src) or ".")
        return f"]({new}{match['anchor'] or ''})"

    return _LINK.sub(rewrite, markdown)
