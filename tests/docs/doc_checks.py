"""What the documentation tests check, as pure functions of a text and the repository's file list.

Three checks, each a function that returns the problems it finds (an empty list means none), so
that a test can feed it a control string and see it fail:

* :func:`missing_citations`: a text names a Markdown document (``X.md section N``, ``see Y.md``, a
  link to ``Z.md``) that the repository does not hold, or a numbered section the document lacks;
* :func:`work_log_phrases`: a page speaks of the work that made it (rounds, lent machines,
  sessions, the project's own issue numbers) instead of the product;
* :func:`unresolved_references`: a relative link, a repository path in backticks, or a dotted
  ``viasd_adapt.`` name in backticks that does not resolve to a file, folder, heading or definition.

No model, no torch: the checks read files only.
"""

from __future__ import annotations

import fnmatch
import os
import re
import subprocess
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path, PurePosixPath

URL = re.compile(r"[a-z][a-z0-9+.-]*://[^\s)>\]`'\"]*", re.IGNORECASE)
FENCE = re.compile(r"^(\s*)(```|~~~)")
MARKDOWN_LINK = re.compile(r"!?\[(?P<text>[^\]]*)\]\((?P<target>[^)\s]*)(?:\s+\"[^\"]*\")?\)")
HEADING = re.compile(r"^(#{1,6})\s+(?P<title>.+?)\s*#*\s*$")
INLINE_CODE = re.compile(r"(?<!`)`(?P<code>[^`\n]+)`(?!`)")
#: a Markdown file name as prose names it (``docs/method.md``, ``VIA-SD.md``, ``../README.md``)
MD_NAME = re.compile(r"(?<![\w/.-])(?P<doc>(?:\.{1,2}/)?[\w][\w./-]*\.md)(?![\w-])")
SECTION_AFTER = re.compile(r"^[`'\"]?,?\s+(?:sections?|§)\s*(?P<nums>\d+(?:\s*(?:,|and|or|-)\s*\d+)*)", re.IGNORECASE)
NUMBERED_HEADING = re.compile(r"^(?P<num>\d+)\.\s")


# --------------------------------------------------------------------------- the repository


@dataclass(frozen=True)
class Repository:
    """The files of a checkout, as the documentation checks see them."""

    root: Path
    files: frozenset[str]  # the repository's files, posix paths relative to the root

    @classmethod
    def of(cls, root: Path) -> Repository:
        """The files of the git checkout at ``root``: tracked ones and new ones git does not ignore,
        so that a page is checked before it is committed (every file under it, outside hidden and
        build folders, when it is not a git checkout)."""
        try:
            out = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=root,
                                 capture_output=True, check=True).stdout
            files = frozenset(name for name in out.decode("utf-8").split("\0") if name and (root / name).exists())
        except (OSError, subprocess.CalledProcessError):
            files = frozenset(_walk(root))
        return cls(root, files)

    @cached_property
    def folders(self) -> frozenset[str]:
        found = set()
        for name in self.files:
            parent = PurePosixPath(name).parent
            while str(parent) != ".":
                found.add(str(parent))
                parent = parent.parent
        return frozenset(found)

    @cached_property
    def basenames(self) -> frozenset[str]:
        return frozenset(PurePosixPath(name).name for name in self.files)

    @cached_property
    def top_level(self) -> frozenset[str]:
        return frozenset(name.split("/")[0] for name in self.files)

    @cached_property
    def packages(self) -> frozenset[str]:
        """The folders directly under ``viasd_adapt/`` (``core``, ``search``, ...), including the
        ``adapters`` link: a path such as ``core/cycle.py`` is read as ``viasd_adapt/core/cycle.py``."""
        package = self.root / "viasd_adapt"
        return frozenset(p.name for p in package.iterdir() if p.is_dir() and not p.name.startswith(("_", ".")))

    def exists(self, relative: str) -> bool:
        """Whether a posix path relative to the root is a tracked file or a folder of one (or, for a
        path through the ``viasd_adapt/adapters`` link, a file or folder on disk)."""
        relative = _normal(relative)
        if relative is None:
            return False
        if relative in ("", ".") or relative in self.files or relative in self.folders:
            return True
        return relative.startswith("viasd_adapt/adapters") and (self.root / relative).exists()

    def text(self, relative: str) -> str:
        return (self.root / relative).read_text(encoding="utf-8")

    def glob(self, pattern: str) -> list[str]:
        return [name for name in self.files if fnmatch.fnmatchcase(name, pattern)]


def _walk(root: Path):
    for folder, dirs, names in os.walk(root):
        dirs[:] = [d for d in dirs if not d.startswith(".") and d not in ("__pycache__", "build", "dist")]
        for name in names:
            yield Path(folder, name).relative_to(root).as_posix()


def _normal(relative: str) -> str | None:
    """``a/./b/../c`` -> ``a/c``; None for a path that leaves the repository."""
    parts: list[str] = []
    for part in relative.strip("/").split("/"):
        if part in ("", "."):
            continue
        if part == "..":
            if not parts:
                return None
            parts.pop()
        else:
            parts.append(part)
    return "/".join(parts)


def _join(base_file: str, relative: str) -> str | None:
    return _normal(str(PurePosixPath(base_file).parent / relative))


def markdown_pages(repo: Repository) -> list[str]:
    """The pages under ``docs/`` (the README is checked on its own, :data:`README`)."""
    return sorted(name for name in repo.files if name.startswith("docs/") and name.endswith(".md"))


README = "README.md"


# --------------------------------------------------------------------------- headings


def strip_code_blocks(text: str) -> str:
    """The text with fenced code blocks blanked out (their lines kept, empty), so that line numbers
    stay right and nothing inside a block is read as prose or as a heading."""
    out, fence = [], None
    for line in text.splitlines():
        match = FENCE.match(line)
        if fence is None and match:
            fence = match.group(2)
            out.append("")
        elif fence is not None:
            if line.strip().startswith(fence):
                fence = None
            out.append("")
        else:
            out.append(line)
    return "\n".join(out)


def headings(markdown: str) -> list[str]:
    """The titles of a page's headings, outside code blocks, in order."""
    found = []
    for line in strip_code_blocks(markdown).splitlines():
        match = HEADING.match(line)
        if match:
            found.append(match.group("title"))
    return found


def slug(title: str) -> str:
    """The anchor a repository browser gives a heading (GitHub's rule: lower case, formatting and
    punctuation dropped, spaces to hyphens)."""
    title = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", title)  # a link keeps its text
    title = title.replace("`", "").lower()
    title = re.sub(r"[^\w\- ]", "", title)
    return title.replace(" ", "-")


def anchors(markdown: str) -> set[str]:
    """Every heading anchor of a page (a repeated title gets ``-1``, ``-2``, ... as on GitHub)."""
    seen: dict[str, int] = {}
    found = set()
    for title in headings(markdown):
        base = slug(title)
        count = seen.get(base, 0)
        found.add(base if count == 0 else f"{base}-{count}")
        seen[base] = count + 1
    return found


def numbered_sections(markdown: str) -> set[int]:
    """The numbers of a page's numbered headings (``## 4. Gate 1, ...`` -> 4)."""
    numbers = set()
    for title in headings(markdown):
        match = NUMBERED_HEADING.match(title)
        if match:
            numbers.add(int(match.group("num")))
    return numbers


# --------------------------------------------------------------------------- check 1: citations


def _resolve_document(repo: Repository, citing: str, name: str) -> str | None:
    """The repository file a cited document name means: relative to the citing file, or to the
    root; a bare name (no folder) may be any tracked file of that name. None: not in the repository."""
    for candidate in (_join(citing, name), _normal(name)):
        if candidate is not None and candidate in repo.files:
            return candidate
    if "/" not in name:
        matches = sorted(f for f in repo.files if PurePosixPath(f).name == name)
        if matches:
            return matches[0]
    return None


def _section_numbers(text: str) -> list[int]:
    match = SECTION_AFTER.match(text)
    if not match:
        return []
    numbers: list[int] = []
    for low, high in re.findall(r"(\d+)(?:\s*-\s*(\d+))?", match.group("nums")):
        numbers.extend(range(int(low), int(high or low) + 1))
    return numbers


def missing_citations(repo: Repository, citing: str, text: str) -> list[str]:
    """Documents ``text`` (the content of the file ``citing``) names that the repository lacks, and
    numbered sections of a document that it does not have: ``"<citing>:<line>: ..."``.

    A citation is any Markdown file name in the text: ``X.md section N``, ``see Y.md``, a link to
    ``Z.md``, ``W.md's advice``. Web addresses are not citations of the repository's documents.
    """
    problems = []
    for number, line in enumerate(text.splitlines(), start=1):
        line = URL.sub(" ", line)
        for match in MD_NAME.finditer(line):
            name = match.group("doc")
            found = _resolve_document(repo, citing, name)
            if found is None:
                problems.append(f"{citing}:{number}: cites {name}, which is not in the repository")
                continue
            sections = _section_numbers(line[match.end():])
            if sections:
                have = numbered_sections(repo.text(found)) if found.endswith(".md") else set()
                for section in sections:
                    if section not in have:
                        problems.append(f"{citing}:{number}: cites {name} section {section}, which {found} does not "
                                        f"have (its numbered sections: {sorted(have) or 'none'})")
    return problems


# --------------------------------------------------------------------------- check 2: the work log

#: (what it is, pattern): phrases that speak of the work that made a page, not of the product.
WORK_LOG = [
    ("a round of work", re.compile(r"\b(?:this|last|earlier) round\b", re.IGNORECASE)),
    ("a lent machine", re.compile(r"\blent\b|\bdevice tool\b", re.IGNORECASE)),
    ("a session of work", re.compile(r"\b(?:this|next|previous|earlier|current) session\b", re.IGNORECASE)),
    # A user needs the fact and its conditions, not how the measurement went on the day.
    ("the circumstances of a measurement", re.compile(
        r"\bdownloaded where\b|\btrained here\b|\bthe other core (?:was )?busy\b|\b(?:were|was|is) not run again\b"
        r"|\beat the budget\b|\b(?:pairs?|models?) we have\b", re.IGNORECASE)),
    ("an issue of the project", re.compile(r"\bissues?\s*#?\s*\d+|\bissue's|\bissues'|\bgoals? of the issues?\b"
                                           r"|(?<![\w.#/-])#\d+\b", re.IGNORECASE)),
]


def work_log_phrases(name: str, text: str) -> list[str]:
    """Phrases of :data:`WORK_LOG` in ``text`` (the page ``name``), outside web addresses and link
    targets: ``"<name>:<line>: <what> ('<phrase>')"``.

    An upstream project's issue is fine: a link to its tracker, or ``transformers#12345`` (a ``#N``
    right after a project name).
    """
    problems = []
    for number, line in enumerate(text.splitlines(), start=1):
        line = MARKDOWN_LINK.sub(lambda m: f"[{m.group('text')}]", line)
        line = URL.sub(" ", line)
        for what, pattern in WORK_LOG:
            for match in pattern.finditer(line):
                problems.append(f"{name}:{number}: speaks of {what} ({match.group(0)!r})")
    return problems


# --------------------------------------------------------------------------- check 3: references

PATH_SUFFIXES = (".py", ".md", ".sh", ".json", ".jsonl", ".txt", ".png", ".toml", ".cfg", ".yml", ".yaml")
PLACEHOLDER = re.compile(r"[<>$~{}]|\.\.\.|^-")


def _expand_braces(token: str) -> list[str]:
    match = re.search(r"\{([^{}]*)\}", token)
    if not match:
        return [token]
    expanded = []
    for choice in match.group(1).split(","):
        expanded.extend(_expand_braces(token[: match.start()] + choice + token[match.end():]))
    return expanded


def _path_problem(repo: Repository, page: str, token: str) -> str | None:
    """Why a backticked token that names a repository path does not resolve, or None (also None
    for a token that is not a repository path: a flag, a row name such as ``hf/plain``, a
    placeholder such as ``<cache>/gguf/``)."""
    token = token.strip().rstrip(".,;:)")
    token, _, test_name = token.partition("::")
    for expanded in _expand_braces(token):
        if "{" in expanded or "}" in expanded:
            continue
        problem = _one_path_problem(repo, page, expanded, test_name)
        if problem:
            return problem
    return None


def _one_path_problem(repo: Repository, page: str, token: str, test_name: str) -> str | None:
    if not token or PLACEHOLDER.search(token) or URL.match(token):
        return None
    if token.startswith(("./", "../")):
        relative = _join(page, token)
    elif "/" in token:
        first = token.split("/")[0]
        if first in repo.top_level:
            relative = _normal(token)
        elif first in repo.packages:
            relative = _normal("viasd_adapt/" + token)
        else:
            return None  # not a repository path (a row name, a folder inside a pair, ...)
    elif token.endswith(PATH_SUFFIXES) and token in repo.top_level:
        relative = token
    else:
        return None
    if relative is None:
        return f"{token} leaves the repository"
    if "*" in relative or "?" in relative:
        return None if repo.glob(relative) else f"{token} matches no file"
    if not repo.exists(relative):
        return _module_notation_problem(repo, token, relative)
    if test_name:
        names = re.split(r"[:\[]", test_name)
        if not re.search(rf"\bdef {re.escape(names[-1] if names[-1] else names[0])}\b", repo.text(relative)):
            return f"{token}::{test_name}: no such test in {relative}"
    return None


def _module_notation_problem(repo: Repository, token: str, relative: str) -> str | None:
    """A path that is no file may name a module the way a dotted name does, with the folders as a
    path: ``config/build_report`` (the module ``config/build_report.py``) or
    ``config/tuned.TunedSettings`` (a name the module defines). Why it does not resolve, or None."""
    folder, _, last = relative.rpartition("/")
    module, _, attribute = last.partition(".")
    path = f"{folder}/{module}.py" if folder else f"{module}.py"
    if not repo.exists(path):
        return f"{token} does not exist"
    if attribute and not _defines(repo.text(path), attribute.split(".")[0]):
        return f"{token}: {path} does not define {attribute}"
    return None


def _module_file(repo: Repository, parts: list[str]) -> tuple[str, int] | None:
    """The file of the longest module prefix of ``parts`` and how many parts it used."""
    for used in range(len(parts), 0, -1):
        base = "/".join(parts[:used])
        for candidate in (f"{base}.py", f"{base}/__init__.py"):
            if repo.exists(candidate):
                return candidate, used
    return None


def _defines(source: str, name: str) -> bool:
    """Whether a module's source defines or imports ``name`` at some level (a function, a class, an
    assignment, an attribute or field, an import, an ``__all__`` entry)."""
    escaped = re.escape(name)
    return bool(re.search(rf"^\s*(?:async\s+)?(?:def|class)\s+{escaped}\b|^\s*{escaped}\s*(?::|=)|"
                          rf"\bimport\b[^\n]*\b{escaped}\b|^\s+{escaped},?\s*$|[\"']{escaped}[\"']",
                          source, re.MULTILINE))


def _dotted_problem(repo: Repository, token: str) -> str | None:
    """Why a dotted ``viasd_adapt.`` name does not resolve to a module and the names it defines."""
    token = token.strip().rstrip(".,;:")
    token = re.sub(r"\(.*$", "", token)  # a call: resolve_settings(...) -> resolve_settings
    if not re.fullmatch(r"viasd_adapt(\.\w+)+", token):
        return None
    parts = token.split(".")
    found = _module_file(repo, parts)
    if found is None:
        return f"{token}: no such module"
    path, used = found
    source = repo.text(path)
    for name in parts[used:]:
        if not _defines(source, name):
            return f"{token}: {path} does not define {name}"
    return None


def unresolved_references(repo: Repository, page: str, text: str) -> list[str]:
    """Relative links, backticked repository paths and backticked ``viasd_adapt.`` names of the page
    ``page`` that do not resolve: ``"<page>:<line>: ..."``. Links to web addresses are not followed;
    a link's ``#anchor`` must be a heading of the page it points to."""
    problems = []
    page_anchors: dict[str, set[str]] = {}

    def anchors_of(relative: str) -> set[str]:
        if relative not in page_anchors:
            page_anchors[relative] = anchors(text if relative == page else repo.text(relative))
        return page_anchors[relative]

    prose = strip_code_blocks(text)
    for number, line in enumerate(prose.splitlines(), start=1):
        for match in MARKDOWN_LINK.finditer(line):
            target = match.group("target")
            if not target or URL.match(target) or target.startswith("mailto:"):
                continue
            where, _, anchor = target.partition("#")
            relative = page if not where else _join(page, where)
            if relative is None or not repo.exists(relative):
                problems.append(f"{page}:{number}: link to {target}: {where} does not exist")
            elif anchor and relative.endswith(".md") and relative in repo.files and anchor not in anchors_of(relative):
                problems.append(f"{page}:{number}: link to {target}: {relative} has no heading #{anchor}")
        for match in INLINE_CODE.finditer(MARKDOWN_LINK.sub(lambda m: m.group("text"), line)):
            for token in match.group("code").split():
                problem = _dotted_problem(repo, token) or _path_problem(repo, page, token)
                if problem:
                    problems.append(f"{page}:{number}: `{match.group('code')}`: {problem}")
    return problems


__all__ = [
    "README",
    "WORK_LOG",
    "Repository",
    "anchors",
    "headings",
    "markdown_pages",
    "missing_citations",
    "numbered_sections",
    "slug",
    "strip_code_blocks",
    "unresolved_references",
    "work_log_phrases",
]
