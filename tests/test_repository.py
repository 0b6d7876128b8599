"""The repository stands on its own: no tracked file points at design notes outside it.

People who clone threadpilot see only the repository, so what they need is written in its
own ``docs/``. A reference to a document they cannot open (the project's early design
notes, kept elsewhere) is a dead end; this test keeps them out of code, comments, tests,
docs, benchmarks and CI alike. Every page of ``docs/`` is reachable from the README, the
license ``pyproject.toml`` names is there, and the README's quicker test run selects with
a marker that exists.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# Built from pieces so that this file does not match its own patterns.
_SPEC = "SPEC"
_FORBIDDEN = re.compile(
    "|".join(
        [
            _SPEC + r"\.md",
            _SPEC + " §",
            _SPEC + " section",
            r"(?i:seeds? 00\d)",
            r"(?i:\bseeds?/)",
            "SLACK" + "_NOTES",
            "STYLE" + r"\.md",
            "STYLE" + " rule",
            "shared" + " design",
            r"\.\./" + "shared",
            "/work/" + "shared",
        ]
    )
)


def _tracked_files() -> list[Path]:
    try:
        listed = subprocess.run(
            ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True, timeout=30
        )
    except (OSError, subprocess.CalledProcessError) as exc:
        pytest.fail(f"git ls-files failed in {ROOT}: {exc}")
    names = [n for n in listed.stdout.decode().split("\0") if n]
    assert names, "git ls-files listed nothing"
    return [ROOT / n for n in names if not n.startswith(".git/")]


def test_no_tracked_file_points_outside_the_repository() -> None:
    hits: list[str] = []
    for path in _tracked_files():
        if not path.is_file():  # deleted in the working tree, not yet committed
            continue
        text = path.read_bytes().decode("utf-8", errors="replace")
        for number, line in enumerate(text.splitlines(), start=1):
            if (found := _FORBIDDEN.search(line)) is not None:
                where = path.relative_to(ROOT)
                hits.append(f"{where}:{number}: {found.group(0)!r} in {line.strip()[:120]}")
    assert not hits, (
        "Tracked files point at design notes outside the repository; point at docs/ "
        "(or state the rule) instead:\n" + "\n".join(hits)
    )


def test_the_patterns_catch_what_they_must() -> None:
    # The names as they used to appear, assembled here so this file stays clean.
    for sample in (
        "see " + _SPEC + ".md section 3",
        "(" + _SPEC + " §5)",
        "(" + "seed" + " 003)",
        "Seed" + " 001's table",
        "../" + "shared/" + "seed" + "s/x.md",
        "SLACK" + "_NOTES.md",
        "STYLE" + " rule 9",
    ):
        assert _FORBIDDEN.search(sample), sample
    for fine in ("ToolSpec", "ParamSpec", "timespec='seconds'", "shared.db", "docs/stopping.md"):
        assert not _FORBIDDEN.search(fine), fine


# -- what a newcomer reads first ----------------------------------------------------------

README = ROOT / "README.md"


def test_every_docs_page_is_linked_from_the_readme_and_every_link_opens() -> None:
    linked = set(re.findall(r"\]\(((?:docs/[^)#\s]+)|LICENSE)", README.read_text()))
    pages = {path.relative_to(ROOT).as_posix() for path in (ROOT / "docs").glob("*.md")}

    assert "docs/admin.md" in pages  # the admin's guide
    assert pages <= linked, f"not linked from the README: {sorted(pages - linked)}"
    assert all((ROOT / link).is_file() for link in linked), linked


def test_the_license_pyproject_names_is_in_the_repository() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    text = (ROOT / "LICENSE").read_text()

    assert project["license"] == "MIT"
    assert text.startswith("MIT License\n")
    assert re.search(r"^Copyright \(c\) \d{4} threadpilot contributors$", text, re.MULTILINE)


def test_the_readme_quicker_test_run_selects_with_a_marker_that_exists() -> None:
    options = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]
    markers = {line.split(":", 1)[0] for line in options["ini_options"]["markers"]}
    runs = [
        shlex.split(command)
        for command in re.findall(r"`([^`]*python -m pytest[^`]*)`", README.read_text())
    ]

    after_pytest = [words[words.index("pytest") + 1 :] for words in runs if "pytest" in words]
    selected = [args[args.index("-m") + 1] for args in after_pytest if "-m" in args]
    assert selected, "the README offers no run that leaves the slow tests out"
    for expression in selected:
        assert set(re.findall(r"\w+", expression)) - {"not", "and", "or"} <= markers
    # A newcomer is told what the whole run costs before choosing the quicker one.
    assert re.search(r"whole suite takes about \d+ minutes", README.read_text())
    # ... and what the quicker one costs, and that neither reads their own .env.
    assert re.search(r'-m "not slow"`, which takes about \d+ minutes', README.read_text())
    assert re.search(r"suite ignores your own settings", README.read_text())
