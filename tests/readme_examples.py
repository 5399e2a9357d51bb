"""A pytest plugin for running a baked service's README examples (pytest-markdown-docs):
each Python block runs as the script a reader would save it as, so that its
`if __name__ == "__main__":` part runs too (the producer example sends)."""

from __future__ import annotations


def pytest_markdown_docs_globals() -> dict[str, object]:
    return {"__name__": "__main__"}
