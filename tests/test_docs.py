"""The documentation's commands run: every ```console and ```python block of
README.md and docs/**/*.md.

Conventions the pages follow (docs/index.md, "Writing these pages"):

- Shell commands are ```console blocks: a line starting with `$ ` is a command
  (continued while a line ends with a backslash), the lines after it its output.
- Output that contains `: error: ` is a command expected to fail: it must exit
  with status 2 and print that line on stderr.
- A block that cannot run here (a GPU, fio, several machines, the environment
  the tests themselves run in), or that repeats a command another page runs,
  has, as the last line before its fence,
  `*Not run by the docs test: REASON*`. Its `gnnsys` commands are still parsed
  by gnnsys's own argument parser, so an option that no longer exists fails.
- No ```bash/```sh/```shell blocks: every shell command is in a console block.

Each page runs in its own empty directory, its blocks in order (a page's later
blocks use what its earlier ones made), with a copy of benchmarks/ beside them.
Everything a page writes there must be in a folder the repository's
.gitignore ignores (data/, runs/), so that the commands, run from a clone's
root, leave nothing for git to see.
All pages run in one child process that imports gnnsys once: a `gnnsys ...`
command without shell syntax (continuation lines included) runs in it through
`gnnsys.cli.main`, anything else (and `--mem-limit`, which bounds the
process's own memory) through bash; ```python blocks are executed
in one namespace per page.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import traceback
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
NOT_RUN = re.compile(r"^\*Not run by the docs test: (?P<reason>.+)\*$")
FENCE = re.compile(r"^(?P<fence>`{3,})(?P<info>[^`]*)$")
SHELL_LANGS = {"bash", "sh", "shell", "zsh", "shell-session"}
SHELL_SYNTAX = re.compile(r"[|;&<>$`*()]")
SHELL_OPERATORS = {"&&", "||", ";", "|", "&"}
# --mem-limit bounds the process's own memory, which in the shared child holds every earlier page's.
OWN_PROCESS = re.compile(r"--mem-limit\b")
STEP_TIMEOUT_S = 120
# Every documented command in one child: about 90 s on a quiet 2-core machine; the bound leaves room
# for a loaded or slow one (pytest-timeout's 300 s per test would cut the fixture's setup short).
DOCS_RUN_TIMEOUT_S = 1200


@dataclass
class Command:
    """One `$ ` command of a console block and the output the page shows for it."""

    line: int
    text: str
    output: list[str] = field(default_factory=list)

    @property
    def expected_errors(self) -> list[str]:
        return [line for line in self.output if ": error: " in line]


@dataclass
class Block:
    page: str
    line: int
    lang: str
    text: str
    not_run: str | None

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"

    def commands(self) -> list[Command]:
        commands: list[Command] = []
        continued = False
        for offset, raw in enumerate(self.text.splitlines()):
            if continued:
                commands[-1].text += "\n" + raw
            elif raw.startswith("$ "):
                commands.append(Command(self.line + 1 + offset, raw[2:]))
            elif commands:
                commands[-1].output.append(raw)
            elif raw.strip():
                raise AssertionError(f"{self.page}:{self.line + 1 + offset}: output before the first `$ ` command")
            continued = raw.endswith("\\") and (continued or raw.startswith("$ "))
        return commands


def page_name(page: Path) -> str:
    return str(page.relative_to(ROOT))


def read_blocks(page: Path) -> list[Block]:
    """The fenced blocks of a Markdown page (directive fences such as ```{toctree} included)."""
    blocks, lines, i = [], page.read_text().splitlines(), 0
    while i < len(lines):
        match = FENCE.match(lines[i])
        if not match:
            i += 1
            continue
        fence, lang = match["fence"], match["info"].strip().split(" ")[0]
        end = next((j for j in range(i + 1, len(lines)) if lines[j].strip() == fence), None)
        assert end is not None, f"{page_name(page)}:{i + 1}: unclosed code fence"
        before = next((lines[j].strip() for j in range(i - 1, -1, -1) if lines[j].strip()), "")
        reason = NOT_RUN.match(before)
        blocks.append(Block(page_name(page), i + 1, lang, "\n".join(lines[i + 1 : end]), reason and reason["reason"]))
        i = end + 1
    return blocks


def runnable_pages() -> dict[str, list[Block]]:
    pages = {}
    for page in PAGES:
        blocks = [b for b in read_blocks(page) if b.lang in ("console", "python") and not b.not_run]
        if blocks:
            pages[page_name(page)] = blocks
    return pages


def not_run_blocks() -> list[Block]:
    return [b for page in PAGES for b in read_blocks(page) if b.lang in ("console", "python") and b.not_run]


def gnnsys_argvs(command: str) -> list[list[str]]:
    """The argument lists of every gnnsys invocation in a shell command
    (`gnnsys ...`, `.venv/bin/gnnsys ...`, `python -m gnnsys ...`, `torchrun ... -m gnnsys ...`)."""
    lexer = shlex.shlex(command.replace("\\\n", " "), posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    parts: list[list[str]] = [[]]
    for token in lexer:  # quoted operators stay inside their word
        if token in SHELL_OPERATORS:
            parts.append([])
        else:
            parts[-1].append(token)
    argvs = []
    for words in parts:
        for k, word in enumerate(words):
            if word.endswith("/gnnsys") or word == "gnnsys":
                if k == 0 or words[k - 1] == "-m":
                    argvs.append(words[k + 1 :])
                    break
    return argvs


# ----------------------------------------------------------------------------- the child process


def _run_in_process(argv: list[str]) -> tuple[int, str, str]:
    from gnnsys.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            status = main(argv)
        except SystemExit as e:  # argparse
            status = e.code if isinstance(e.code, int) else 2
    return status, out.getvalue(), err.getvalue()


def _run_shell(command: str, env: dict) -> tuple[int, str, str]:
    try:
        done = subprocess.run(
            ["bash", "-c", command], env=env, capture_output=True, text=True, timeout=STEP_TIMEOUT_S, check=False
        )
    except subprocess.TimeoutExpired:
        return 124, "", f"timed out after {STEP_TIMEOUT_S} s"
    return done.returncode, done.stdout, done.stderr


def _run_python(code: str, where: str, namespace: dict) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            exec(compile(code, where, "exec"), namespace)
            status = 0
        except BaseException:
            traceback.print_exc()
            status = 1
    return status, out.getvalue(), err.getvalue()


def files_under(folder: Path) -> set[str]:
    """The paths of every file under `folder`, relative to it."""
    return {str(p.relative_to(folder)) for p in folder.rglob("*") if not p.is_dir()}


def _run_pages(plan: dict, workdir: Path) -> tuple[dict, dict]:
    """Run every page's blocks in its own directory; stop a page at its first
    unexpected status. Returns ({page: step results}, {page: the files it wrote})."""
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    env["GNNSYS_CACHE_DIR"] = os.environ["GNNSYS_CACHE_DIR"] = str(workdir / "gnnsys-cache")
    results, written = {}, {}
    for page, blocks in plan.items():
        cwd = workdir / re.sub(r"\W", "_", page)
        shutil.copytree(
            ROOT / "benchmarks", cwd / "benchmarks", ignore=shutil.ignore_patterns("results", ".*", "__pycache__")
        )
        copied = files_under(cwd)
        os.chdir(cwd)
        namespace: dict = {"__name__": "__main__"}
        steps = results[page] = []
        for block in blocks:
            if block["lang"] == "python":
                steps.append({"where": block["where"], "expect": 0})
                steps[-1]["status"], steps[-1]["stdout"], steps[-1]["stderr"] = _run_python(
                    block["text"], block["where"], namespace
                )
            for command in block["commands"]:
                text = command["text"].replace("\\\n", " ")
                plain = text.startswith("gnnsys ") and not SHELL_SYNTAX.search(text) and not OWN_PROCESS.search(text)
                status, stdout, stderr = _run_in_process(shlex.split(text)[1:]) if plain else _run_shell(text, env)
                expect = 2 if command["expected_errors"] else 0
                steps.append(dict(where=command["where"], expect=expect, status=status, stdout=stdout, stderr=stderr))
                steps[-1]["missing"] = [line for line in command["expected_errors"] if line.strip() not in stderr]
                if status != expect or steps[-1]["missing"]:
                    break
            if steps and (steps[-1]["status"] != steps[-1]["expect"] or steps[-1].get("missing")):
                break
        written[page] = sorted(files_under(cwd) - copied)
    return results, written


def _main(plan_file: str, workdir: str) -> None:
    plan = json.loads(Path(plan_file).read_text())
    results, written = _run_pages(plan, Path(workdir))
    Path(plan_file).with_suffix(".out.json").write_text(json.dumps({"steps": results, "written": written}))


# ----------------------------------------------------------------------------- the tests


@pytest.fixture(scope="module")
def page_results(tmp_path_factory):
    """Runs every runnable page once, in one child process;
    {"steps": {page: [step results]}, "written": {page: [the files it wrote]}}."""
    work = tmp_path_factory.mktemp("docs")
    plan = {
        page: [
            {
                "lang": b.lang,
                "where": b.where,
                "text": b.text,
                "commands": [
                    {"where": f"{b.page}:{c.line}", "text": c.text, "expected_errors": c.expected_errors}
                    for c in (b.commands() if b.lang == "console" else [])
                ],
            }
            for b in blocks
        ]
        for page, blocks in runnable_pages().items()
    }
    plan_file = work / "plan.json"
    plan_file.write_text(json.dumps(plan))
    subprocess.run(
        [sys.executable, __file__, str(plan_file), str(work)], cwd=work, check=True, timeout=DOCS_RUN_TIMEOUT_S
    )
    return json.loads(plan_file.with_suffix(".out.json").read_text())


@pytest.mark.timeout(DOCS_RUN_TIMEOUT_S)
@pytest.mark.parametrize("page", sorted(runnable_pages()))
def test_page_commands_run(page, page_results):
    steps = page_results["steps"][page]
    expected = sum(1 if b.lang == "python" else len(b.commands()) for b in runnable_pages()[page])
    for step in steps:
        shown = f"{step['where']}: exit status {step['status']}\nstdout:\n{step['stdout']}\nstderr:\n{step['stderr']}"
        assert step["status"] == step["expect"], f"expected exit status {step['expect']}, got\n{shown}"
        assert not step.get("missing"), f"the page shows {step['missing']}, not printed:\n{shown}"
    assert len(steps) == expected, f"{page}: ran {len(steps)} of {expected} steps"


@pytest.mark.timeout(DOCS_RUN_TIMEOUT_S)
@pytest.mark.parametrize("page", sorted(runnable_pages()))
def test_page_writes_only_into_ignored_folders(page, page_results):
    """What a page's commands write (checkpoints, predictions, JSON, datasets)
    lands in a folder .gitignore ignores, not among the repository's files."""
    written = page_results["written"][page]
    check = subprocess.run(
        ["git", "check-ignore", "--no-index", "--stdin", "-v", "-n"],
        cwd=ROOT,
        input="\n".join(written),
        capture_output=True,
        text=True,
        check=False,
    )
    if check.returncode not in (0, 1):
        pytest.skip(f"git cannot read the repository's .gitignore here: {check.stderr.strip()}")
    seen = [line.split("\t", 1) for line in check.stdout.splitlines()]
    assert len(seen) == len(written), check.stderr
    outside = [path for source, path in seen if source == "::"]
    assert not outside, f"{page} writes outside the ignored folders (write under data/ or runs/): {outside}"


def parser_of_options():
    """gnnsys's argument parser without the check that a path it reads exists
    (a block that is not run names paths that are not here)."""
    import argparse

    from gnnsys.cli import build_parser
    from gnnsys.datasets.input_paths import input_path

    parser = build_parser()
    parsers = [parser]
    while parsers:
        for action in parsers.pop()._actions:
            if action.type is input_path:
                action.type = None
            if isinstance(action, argparse._SubParsersAction):
                parsers.extend(action.choices.values())
    return parser


@pytest.mark.parametrize("block", not_run_blocks(), ids=lambda b: b.where)
def test_not_run_block(block):
    """A block marked not run still names only options gnnsys has; then it is skipped, saying why."""
    from gnnsys.cli import glue_negative_lists

    parser = parser_of_options()
    for command in block.commands() if block.lang == "console" else []:
        for argv in gnnsys_argvs(command.text):
            if argv and argv[0] in ("-h", "--help", "--version"):
                continue
            try:
                parser.parse_args(glue_negative_lists(argv))
            except SystemExit as e:
                pytest.fail(f"{block.where}: gnnsys {' '.join(argv)}: not accepted by gnnsys's parser ({e})")
    pytest.skip(f"{block.where}: not run: {block.not_run}")


def test_pages_use_console_blocks():
    """Shell commands are in ```console blocks, where the test finds them."""
    shell = [b.where for page in PAGES for b in read_blocks(page) if b.lang in SHELL_LANGS]
    assert not shell, f"use ```console with `$ ` prompts: {shell}"
    for page in PAGES:
        for b in read_blocks(page):
            if b.lang == "console":
                assert b.commands(), f"{b.where}: a console block without a `$ ` command"


def test_api_reference_covers_the_public_names():
    """Every name in a public package's `__all__` appears in the API reference."""
    import gnnsys
    import gnnsys.datasets
    import gnnsys.samplers
    import gnnsys.storage
    import gnnsys.storage.cache

    reference = "\n".join(p.read_text() for p in (ROOT / "docs" / "api").glob("*.md"))
    for module in (gnnsys, gnnsys.datasets, gnnsys.samplers, gnnsys.storage, gnnsys.storage.cache):
        documented = f"automodule:: {module.__name__}\n   :members:" in reference
        for name in module.__all__:
            assert documented or re.search(rf"\b{name}\b", reference), f"{module.__name__}.{name} is not in docs/api/"


if __name__ == "__main__":
    # Run as a script, this file's folder is sys.path[0], where tests/gnnsys would shadow the package.
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]
    _main(*sys.argv[1:])
