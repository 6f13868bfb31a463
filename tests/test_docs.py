"""The README and docs/*.md stay true to the tree and to the CLI: every relative link resolves to a
file (and to a heading, by GitHub's anchor rules, where it names one), and every ``harness ...``
command line they show, in a fenced block or an inline code span, names real commands,
subcommands and options of ``harness.cli``. No subprocesses; the commands are resolved through
click as ``harness`` resolves them (:meth:`harness.cli.LazyGroup.get_command`)."""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from pathlib import Path

import click
import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

FENCE = re.compile(r"^(\s*)(`{3,}|~{3,})")
HEADING = re.compile(r"^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
CODE_SPAN = re.compile(r"(?<!`)(`+)(?!`)(.+?)(?<!`)\1(?!`)", re.DOTALL)
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]*)>?(?:\s+\"[^\"]*\")?\s*\)")
SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")
PROMPT = re.compile(r"^[\w.@-]*\$\s+")  # node0$ harness run ...
PLACEHOLDER = re.compile(r"^[A-Z][A-Z0-9_]*$")  # harness COMMAND --help


@dataclass(frozen=True)
class Page:
    """A Markdown page split as GitHub renders it: prose (fenced blocks blanked, line numbers kept)
    and the fenced blocks' lines."""

    path: Path
    prose: list[str]
    fenced: list[list[tuple[int, str]]]

    @property
    def name(self) -> str:
        return self.path.relative_to(ROOT).as_posix() if self.path.is_relative_to(ROOT) else self.path.name


def parse(path: Path, text: str | None = None) -> Page:
    prose, fenced, block, fence = [], [], [], None
    for number, line in enumerate((path.read_text() if text is None else text).splitlines(), 1):
        opening = FENCE.match(line)
        if fence is None and opening:
            fence, block = opening.group(2), []
            prose.append("")
        elif fence is not None:
            if line.strip().startswith(fence[0] * len(fence)) and not line.strip().strip(fence[0]):
                fence = None
                fenced.append(block)
            else:
                block.append((number, line))
            prose.append("")
        else:
            prose.append(line)
    if fence is not None:
        fenced.append(block)
    return Page(path, prose, fenced)


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: its text (code and links keep their text), lower case,
    punctuation dropped (letters, digits, '_', '-' and spaces stay), spaces to '-'."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading).replace("`", "")
    return re.sub(r"[^\w\- ]", "", text.strip().lower()).replace(" ", "-")


def anchors(page: Page) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    for line in page.prose:
        match = HEADING.match(line)
        if not match:
            continue
        base = slug(match.group(2))
        count = seen.get(base, 0)
        seen[base] = count + 1
        out.add(base if count == 0 else f"{base}-{count}")
    return out


def paragraphs(page: Page) -> list[tuple[int, str]]:
    """(first line number, text) of every run of non-blank prose lines: code spans never cross one."""
    out, start, lines = [], None, []
    for number, line in enumerate([*page.prose, ""], 1):
        if line.strip():
            start = number if start is None else start
            lines.append(line)
        elif lines:
            out.append((start, "\n".join(lines)))
            start, lines = None, []
    return out


def code_spans(page: Page) -> list[tuple[int, str]]:
    out = []
    for start, text in paragraphs(page):
        for match in CODE_SPAN.finditer(text):
            out.append((start + text.count("\n", 0, match.start()), " ".join(match.group(2).split())))
    return out


def links(page: Page) -> list[tuple[int, str]]:
    out = []
    for start, text in paragraphs(page):
        text = CODE_SPAN.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), text)
        for match in LINK.finditer(text):
            out.append((start + text.count("\n", 0, match.start()), match.group(1)))
    return out


def link_problems(page: Page, page_anchors=None) -> list[str]:
    """One line per relative link that does not resolve."""
    page_anchors = page_anchors or (lambda p: anchors(parse(p)))
    bad = []
    for number, target in links(page):
        if not target or SCHEME.match(target) or target.startswith("//"):
            continue
        file_part, _, anchor = target.partition("#")
        if not file_part:  # a heading of this page
            if anchor not in anchors(page):
                bad.append(f"{page.name}:{number}: link to {target}: no such heading here")
            continue
        where = (page.path.parent / file_part).resolve()
        if not where.exists():
            bad.append(f"{page.name}:{number}: link to {target}: no such file")
        elif anchor and where.suffix == ".md" and anchor not in page_anchors(where):
            bad.append(f"{page.name}:{number}: link to {target}: {where.name} has no heading #{anchor}")
    return bad


def command_lines(page: Page) -> list[tuple[int, str]]:
    """Every ``harness ...`` command a page shows: the lines of its fenced blocks (a line indented
    deeper than the one before, or after a trailing backslash, continues it), and the inline code
    spans that start with ``harness ``. Shell chains are split; prompts and comments dropped."""
    candidates = [(n, s) for n, s in code_spans(page) if s.startswith("harness ")]
    for block in page.fenced:
        joined: list[tuple[int, int, str]] = []  # (line, indent, text)
        for number, line in block:
            indent = len(line) - len(line.lstrip())
            if joined and line.strip() and (indent > joined[-1][1] or joined[-1][2].endswith("\\")):
                first, first_indent, text = joined[-1]
                joined[-1] = (first, first_indent, text.rstrip("\\") + " " + line.strip())
            else:
                joined.append((number, indent, line.strip()))
        candidates += [(number, text) for number, _, text in joined]
    out = []
    for number, text in candidates:
        text = re.split(r"(?:^|\s)#", text, maxsplit=1)[0]
        for part in re.split(r"&&|\|\||;", text):
            part = PROMPT.sub("", part.strip())
            if part == "harness" or part.startswith("harness "):
                out.append((number, part))
    return out


@functools.cache
def _command(path: tuple[str, ...]) -> click.Command | None:
    """The click command of ``harness P1 P2 ...``, imported as ``harness`` imports it; None if none."""
    from harness.cli import cli

    command: click.Command = cli
    for name in path:
        if not isinstance(command, click.Group):
            return None
        command = command.get_command(click.Context(command), name)
        if command is None:
            return None
    return command


def _options(command: click.Command) -> set[str]:
    from harness.cli import cli

    names = set(cli.context_settings.get("help_option_names", ["--help"]))
    for param in command.params:
        if isinstance(param, click.Option):
            names.update(param.opts)
            names.update(param.secondary_opts)
    return names


def command_problem(line: str) -> str | None:
    """What is wrong with one ``harness ...`` line, or None. Brackets and ``|`` alternatives are
    read as alternatives, upper-case words and ``...`` as placeholders, and nothing after ``--``
    is checked; every option must be one the command defines."""
    words = [w for w in re.sub(r"[\[\]]", " ", line).split() if w not in ("|", "...")]
    path: list[str] = []
    command = _command(())
    rest = words[1:]
    while isinstance(command, click.Group) and rest and not rest[0].startswith("-"):
        if PLACEHOLDER.match(rest[0]):  # harness COMMAND --help: only what every command has
            command = click.Command("COMMAND")
            break
        path.append(rest.pop(0))
        command = _command(tuple(path))
        if command is None:
            return f"no command 'harness {' '.join(path)}'"
    allowed = _options(command)
    for word in rest:
        if word == "--":
            break
        if not word.startswith("-") or word == "-" or re.match(r"^-\d", word):
            continue
        name = word.split("=", 1)[0]
        if name not in allowed:
            return f"'{' '.join(['harness', *path])}' has no option {name}"
    return None


# ---- the checks ---------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def pages() -> list[Page]:
    return [parse(path) for path in PAGES]


def test_the_docs_are_there(pages):
    names = {page.name for page in pages}
    for command in ("run", "check", "plan", "project", "leaderboard", "report", "infer", "data", "rcp",
                    "summarize", "borrow", "profiles", "rules"):
        assert f"docs/{command}.md" in names, command
    assert {"README.md", "docs/design.md", "docs/limitations.md", "docs/performance.md", "docs/testing.md"} <= names


def test_every_relative_link_resolves(pages):
    cached = functools.cache(lambda path: anchors(parse(path)))
    bad = [problem for page in pages for problem in link_problems(page, cached)]
    assert sum(len(links(page)) for page in pages) > 100  # the parser found the links
    assert not bad, "\n".join(bad)


def test_every_harness_command_shown_is_real(pages):
    shown = [(page.name, number, line) for page in pages for number, line in command_lines(page)]
    assert len(shown) > 100  # the parser found the commands
    bad = [f"{name}:{number}: `{line}`: {problem}" for name, number, line in shown
           if (problem := command_problem(line))]
    assert not bad, "\n".join(bad)


def test_no_page_points_outside_the_repository(pages):
    """The real MLPerf logs are in tests/data/mlperf-logs; no page names the folder beside the
    checkout they were once read from."""
    outside = re.compile(r"\.\./shared\b")
    bad = [f"{page.name}:{number}" for page in pages
           for number, line in enumerate(page.path.read_text().splitlines(), 1) if outside.search(line)]
    assert not bad, bad


# ---- the checker itself sees what it must ---------------------------------------------------------

def test_the_link_check_sees_a_missing_file_and_a_missing_heading(tmp_path):
    (tmp_path / "other.md").write_text("# A title: with `code`\n\n## Two words\n\n## Two words\n")
    text = ("[ok](other.md#a-title-with-code) [ok](other.md#two-words-1) [ok](#here) `[no](code.md)`\n"
            "[gone](nowhere.md) and\n[bad](other.md#no-such-heading) <https://example.org> [bad](#there)\n\n## Here\n")
    page = parse(tmp_path / "page.md", text)
    assert link_problems(page) == [
        "page.md:2: link to nowhere.md: no such file",
        "page.md:3: link to other.md#no-such-heading: other.md has no heading #no-such-heading",
        "page.md:3: link to #there: no such heading here",
    ]


def test_the_command_check_sees_a_made_up_option_and_command(tmp_path):
    text = ("Run `harness run --runs 2\n--no-overlap` or `harness run --made-up-option`.\n\n"
            "```\nharness plan --profile P [--batch-size N | --json]   # a comment --not-an-option\n"
            "node1$ harness rcp check RUN_DIR --json -- --anything\n"
            "harness data export --benchmark B --format criteo-tsv|mlperf-npy [--days 24]\n"
            "            [--gzip] [--bogus] DIR\n"
            "harness COMMAND --help\nharness rcp bogus\n```\n")
    lines = command_lines(parse(tmp_path / "page.md", text))
    assert [(number, command_problem(line)) for number, line in lines] == [
        (1, None),
        (2, "'harness run' has no option --made-up-option"),
        (5, None),
        (6, None),
        (7, "'harness data export' has no option --bogus"),
        (9, None),
        (10, "no command 'harness rcp bogus'"),
    ]
