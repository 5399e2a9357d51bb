"""docs/emulators.md, the page a reader choosing an emulator lands on, names only environment
variables the emulator starter reads: each name on the page is a string in the engine's
doubles (the starter and its machine side), so a variable renamed or dropped in the code
cannot live on in the docs. The READMEs that speak of emulators link to the page."""

from __future__ import annotations

import re

from conftest import ROOT

PAGE = ROOT / "docs" / "emulators.md"
DOUBLES = ROOT / "engine" / "src" / "sqs_worker_engine" / "doubles"
# An environment variable as the page writes one: capitals, digits and at least one underscore.
VARIABLE = re.compile(r"\b[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+\b")
# The ones a reader chooses an emulator with: the page must name them.
CHOICES = {"SQS_EMULATOR", "LOCALSTACK_PORT", "LOCALSTACK_IMAGE", "LOCALSTACK_AUTH_TOKEN"}


def test_every_variable_the_page_names_is_read_by_the_emulator_starter() -> None:
    named = set(VARIABLE.findall(PAGE.read_text()))
    assert named >= CHOICES, f"the page does not name {sorted(CHOICES - named)}"
    source = "\n".join(path.read_text() for path in sorted(DOUBLES.glob("*.py")))
    unread = sorted(name for name in named if f'"{name}"' not in source)
    assert not unread, f"docs/emulators.md names variables the doubles never read: {unread}"


def test_the_readmes_that_speak_of_emulators_link_to_the_page() -> None:
    for readme, link in (
        (ROOT / "README.md", "docs/emulators.md"),
        # The package's description on the index too, where only an absolute link leads anywhere.
        (ROOT / "engine" / "README.md", "https://github.com/org/sqs-worker-template/blob/main/docs/emulators.md"),
        (ROOT / "docs" / "engine" / "emulator-fidelity.md", "../emulators.md"),
    ):
        assert f"]({link})" in readme.read_text(), f"{readme.relative_to(ROOT)} does not link to {link}"
