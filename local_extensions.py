"""The template's Jinja extension under the name cookiecutter's convention gives it, for replay
files and contexts written before cookiecutter.json named it in its package
(sqs_worker_template_jinja/, where every helper lives)."""

from sqs_worker_template_jinja.extension import EngineExtension

__all__ = ["EngineExtension"]
