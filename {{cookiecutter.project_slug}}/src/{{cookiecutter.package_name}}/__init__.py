"""The {{ cookiecutter.project_slug }} worker service."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("{{ cookiecutter.project_slug }}")
except PackageNotFoundError:  # running from a source tree without installing
    __version__ = "0.0.0+unknown"
