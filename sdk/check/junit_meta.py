"""Where and when a check ran, for JUnit's ``testsuite`` attributes.

CI viewers (GitLab's test report, Jenkins, the JUnit publishing actions) show a suite's
``timestamp`` and ``hostname``; the JUnit XSD wants the time as an ``xs:dateTime`` without a
time zone, which here is UTC. Kept apart from the JUnit renderer so that wherever that lives
the metadata is this one function.
"""

from __future__ import annotations

import socket
from datetime import datetime, timedelta, timezone


def testsuite_attributes(seconds: float, now: datetime | None = None) -> dict[str, str]:
    """``timestamp`` (the run's start: ``now`` minus its ``seconds``, UTC) and ``hostname``."""
    end = now or datetime.now(timezone.utc)
    start = end.astimezone(timezone.utc) - timedelta(seconds=max(seconds, 0.0))
    return {"timestamp": start.replace(tzinfo=None).isoformat(timespec="seconds"),
            "hostname": socket.gethostname() or "localhost"}
