"""What a firmware linked: GNU ld map files and ELF files read without any tool
(``mapfile``, ``elf``), the export's manifest (``manifest``) and the check that the link holds
what devicefit verified (``check``, ``devicefit link-check``).

Everything here reads files the user's build wrote, which may be truncated, huge or
malformed: the readers stream or read bounded slices and raise
:class:`~simulator.errors.InputError` (exit 2) for anything they cannot read.
"""
