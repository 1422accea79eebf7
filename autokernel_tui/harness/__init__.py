"""The harness: the judge. Parent-side runner and an isolated worker process."""
