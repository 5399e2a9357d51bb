"""bench/report.py's report, a module a job: lookups over a run's results (results), the
generated worker's targets (targets), the tables and the summary (tables), the sections of
the measures (sections), the method and the reasons a target was missed (explain), the
comparisons with earlier runs (compare), and the chart (chart). Pure functions of the
results JSON, so that `python bench/report.py docs/benchmarks.json` re-renders the report
without running anything."""
