"""Policies' costs shared by the systems: Baleen-TCO (tco), the reports' TCO curve."""
