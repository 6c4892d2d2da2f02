"""The provider's guides (docs/airflow.md, docs/operators.md, docs/connections.md) as Airflow's
providers keep theirs: the example DAG snippets are the example DAGs' own code, and the links
into the guides land on a heading.

A snippet is marked in a guide by ``<!-- example: <file> <name> -->`` before its code block, and
in the example DAG by ``# [START <name>]`` / ``# [END <name>]`` (Airflow's ``exampleinclude``
markers): the block must equal the marked lines, dedented, and every marked region must be shown.
"""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"
GUIDES = ("airflow.md", "operators.md", "connections.md")
EXAMPLE = re.compile(r"<!-- example: (\S+) (\S+) -->\n```python\n(.*?)\n```", re.S)


def marked(path: Path, name: str) -> str:
    lines = path.read_text().splitlines()
    starts = [i for i, line in enumerate(lines) if line.strip() == f"# [START {name}]"]
    ends = [i for i, line in enumerate(lines) if line.strip() == f"# [END {name}]"]
    assert len(starts) == len(ends) == 1 and starts[0] < ends[0], f"{path.name}: markers of {name}"
    return textwrap.dedent("\n".join(lines[starts[0] + 1 : ends[0]]))


def shown() -> list[tuple[str, str, str, str]]:
    return [(guide, *m.groups()) for guide in GUIDES for m in EXAMPLE.finditer((DOCS / guide).read_text())]


@pytest.mark.parametrize("guide, file, name, code", shown(), ids=lambda v: v if "\n" not in str(v) else "code")
def test_each_snippet_is_the_example_dags_code(guide, file, name, code):
    assert code == marked(REPO / file, name), f"{guide}: {name} differs from {file}; copy the marked lines"


def test_every_marked_region_of_the_example_dags_is_shown():
    regions = {
        (f"airflow_provider_dblog/example_dags/{p.name}", m)
        for p in (REPO / "airflow_provider_dblog" / "example_dags").glob("*.py")
        for m in re.findall(r"# \[START (\S+)\]", p.read_text())
    }
    assert len(regions) >= 8
    assert regions == {(file, name) for _, file, name, _ in shown()}


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    text = re.sub(r"```.*?```", "", path.read_text(), flags=re.S)  # a '#' in a code block is no heading
    return {slug(m) for m in re.findall(r"^#{1,6} (.+)$", text, re.M)}


def test_every_link_into_the_guides_lands_on_a_heading():
    """Links from anywhere in the docs, README.md and CHANGELOG.md to the three guides, and
    within them: moving a section to another page must not leave a link behind."""
    sources = [*DOCS.glob("*.md"), REPO / "README.md", REPO / "CHANGELOG.md", REPO / "SECURITY.md"]
    broken = []
    for source in sources:
        for target, anchor in re.findall(r"\]\(((?:docs/|\.\./docs/)?[\w.-]*\.md)?#([\w-]+)\)", source.read_text()):
            page = (source.parent / target).resolve() if target else source
            if page.name in GUIDES and anchor not in anchors(page):
                broken.append(f"{source.name}: {target}#{anchor}")
    assert broken == []
    assert {"install-step-by-step", "airflow-itself-for-a-first-deployment", "many-sources-one-declaration"} <= (
        anchors(DOCS / "airflow.md")
    )  # linked from install.md, deploy.md and README.md
