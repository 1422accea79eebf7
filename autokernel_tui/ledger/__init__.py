"""The ledger: git experiments, results.tsv and events.jsonl (the truth on disk)."""
