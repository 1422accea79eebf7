"""The morning report: one self-contained file (HTML or Markdown) of a run, read from disk only.

``data.collect(workspace, tag)`` gathers what the run's files say (results.tsv, reports/,
events.jsonl, the git ledger, the tasks' ``[profile]`` and a saved ``verify`` result);
``render.html`` / ``render.markdown`` turn it into text; ``svg.progress_plot`` draws the
progress plot. Nothing here imports Textual or torch.
"""
