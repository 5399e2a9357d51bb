"""The template's Jinja helpers: what cookiecutter renders the service with, beyond its
answers. A package with a name no other project uses, because cookiecutter and cruft append
the template's root to sys.path and import by name: a module the baking process already has
under the same name (a harness's own `observability`) would be taken instead.

By job, each module importing only those before it:
- checkout.py: this checkout, as a bake reads it: the engine's limits.py and version, git;
- source.py: where a bake gets its engine, and the template repository its documents link;
- guides.py: the docs site's how-to page of each answer and envelope (imports nothing);
- aws.py: partitions and DNS suffixes, the worker's IAM policy, the owner's secrets;
- filters.py: values written out as YAML or JSON;
- alerts.py, dashboard.py, emf.py: what a bake alerts on and shows, one table each, and the
  EMF metrics they read;
- extension.py: `EngineExtension`, the Jinja extension that hands them all to the templates
  (cookiecutter.json's `_extensions`; local_extensions.py at the root re-exports it for
  replay files that name it there).

A docstring only: importing the package loads none of its modules.
"""
