"""Report: the one typed report every command produces, and its views.

:mod:`.report` holds every section as a frozen dataclass, with the plain data some sections
carry (:mod:`.benchmark`: a phone's figures; :mod:`.display`: the page of a target's own
section); :mod:`.layers` (the per-layer table) and :mod:`.diff` (two reports compared) are
computed from reports, once; :mod:`.views` renders them (text, JSON, HTML, JUnit, Markdown,
CSV, PNG) and computes no number of its own.
"""
