"""Screens of the app: live, review, help, quit, first run."""
