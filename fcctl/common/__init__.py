"""Plumbing shared by every fcctl package except the storage core (layout)."""
