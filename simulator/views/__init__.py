"""Views of a :class:`simulator.report.Report`: each renders numbers the report already has."""
