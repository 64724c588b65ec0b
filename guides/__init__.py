"""Guides (variational families) and their closed-form update steps."""
