"""Files safely: inputs only from regular files, outputs written atomically (temp file +
rename) and never over an input or each other."""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import tempfile
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from devicefit.simulator.errors import DevicefitError, InputError, UsageError
from devicefit.simulator.infra.signals import deferred

#: Pseudo file systems whose entries claim to be regular files of size 0.
_PSEUDO_ROOTS = ("/proc/", "/sys/", "/dev/")


def not_regular(path: Path, st: os.stat_result) -> str | None:
    """Why a file with status ``st`` is no regular file to read (see
    :func:`regular_file_problem`), or None."""
    if stat.S_ISDIR(st.st_mode):
        return "is a folder"
    if not stat.S_ISREG(st.st_mode) or str(path.resolve()).startswith(_PSEUDO_ROOTS):
        return "is not a regular file"
    return None


def regular_file_problem(path: Path) -> str | None:
    """Why ``path`` is no regular file to read (a folder, a device, a FIFO,
    a ``/proc`` entry), or None."""
    try:
        return not_regular(path, path.stat())
    except OSError as exc:
        return f"cannot be read ({exc.strerror or exc})"


def read_regular_bytes(path: Path, what: str, limit: int, kind: str, *,
                       error: type[DevicefitError] = InputError,
                       missing: str | None = None) -> bytes:
    """The bytes of ``path``, at most ``limit`` of them: one ``error`` line for anything
    else (a folder, a FIFO that would block, ``/dev/zero`` that never ends, a file over the
    limit). ``what`` names the file in messages ("the board log"), ``kind`` what to give
    instead; ``missing``: the message for a file that does not exist (else "cannot read")."""
    try:
        st = path.stat()
    except FileNotFoundError as exc:
        if missing is None:
            raise error(f"{path}: cannot read {what}: {exc.strerror or exc}") from None
        raise error(f"{path}: {missing}") from None
    except OSError as exc:
        raise error(f"{path}: cannot read {what}: {exc.strerror or exc}") from None
    if (why := not_regular(path, st)) is not None:
        raise error(f"{path}: {what} {why}; give a {kind}")
    if st.st_size > limit:
        raise error(f"{path}: {what} is {st.st_size:,} bytes; the limit is {limit:,}")
    try:
        with path.open("rb") as f:
            data = f.read(limit + 1)  # the file may grow between stat and read
    except OSError as exc:
        raise error(f"{path}: cannot read {what}: {exc.strerror or exc}") from None
    if len(data) > limit:
        raise error(f"{path}: {what} is larger than the limit of {limit:,} bytes")
    return data


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


@dataclass(frozen=True)
class _Written:
    """An output written inside :func:`all_or_nothing`, and what it replaced (a hard link
    to the old file beside it), if anything."""

    target: Path
    previous: Path | None


#: The outputs of the command now running (None outside :func:`all_or_nothing`).
_written: list[_Written] | None = None


@contextmanager
def all_or_nothing() -> Iterator[None]:
    """One command's outputs: kept if the block ends normally, else as if never written.

    A command writes several files (a model, then its report and page) and reads some back
    (the converted model is evaluated and simulated from disk), so each is written in place
    with :func:`write_atomic` as usual; when the block fails or is interrupted, every file
    it wrote is removed again and a file it replaced gets its old content back. So an
    interrupted or failed command leaves no output, or only complete outputs of a
    completed run. Nested blocks belong to the outermost one.
    """
    global _written
    if _written is not None:
        yield
        return
    _written = []
    try:
        yield
    except BaseException:
        for w in reversed(_written):
            with contextlib.suppress(OSError):
                if w.previous is not None:
                    os.replace(w.previous, w.target)
                elif w.target.is_dir():  # a folder made for the outputs: empty again now
                    w.target.rmdir()
                else:
                    w.target.unlink(missing_ok=True)
        raise
    else:
        for w in _written:
            if w.previous is not None:
                w.previous.unlink(missing_ok=True)
    finally:
        _written = None


def _make_folder(folder: Path) -> None:
    """Create ``folder`` and its missing parents (``-o build/m.tflite``, CI's
    ``reports/junit.xml``), each undone with the outputs inside :func:`all_or_nothing`."""
    missing = []
    while not folder.exists() and folder != folder.parent:
        missing.append(folder)
        folder = folder.parent
    for made in reversed(missing):
        try:
            made.mkdir()
        except FileExistsError:
            continue
        except OSError as exc:
            raise InputError(f"cannot create the output folder {made}: "
                             f"{exc.strerror or exc}") from None
        if _written is not None:
            _written.append(_Written(made.absolute(), None))
    if not folder.is_dir() and not missing:
        raise UsageError(f"output folder {folder} is not a folder")


def _remember(target: Path) -> None:
    """Record ``target`` before it is (re)placed inside :func:`all_or_nothing`."""
    if _written is None or any(w.target == target for w in _written):
        return
    previous = None
    if target.exists():
        previous = target.with_name(f".{target.name}.devicefit-old-{os.getpid()}")
        previous.unlink(missing_ok=True)
        try:
            os.link(target, previous)
        except OSError:  # no hard links here: a copy keeps the old content just as well
            shutil.copy2(target, previous)
    _written.append(_Written(target, previous))


def write_atomic(path: str | Path, data: bytes | str, *,
                 inputs: Iterable[str | Path] = ()) -> Path:
    """Write ``data`` to ``path`` via a temp file in the same folder and ``os.replace``.

    A reader never sees a half-written file, and a crash leaves the old file intact.
    ``inputs`` are the command's input files: writing over one of them is refused.
    Inside :func:`all_or_nothing` the write is undone if the command does not complete.
    """
    target = Path(path)
    for source in inputs:
        if Path(source).exists() and target.exists() and target.resolve() == Path(source).resolve():
            raise UsageError(f"refusing to overwrite the input file {source}; choose another output")
    folder = target.parent if str(target.parent) else Path(".")
    _make_folder(folder)
    payload = data.encode("utf-8") if isinstance(data, str) else data
    try:
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{target.name}.", suffix=".tmp")
    except OSError as exc:
        raise InputError(f"cannot write {target}: {exc.strerror or exc}") from None
    try:
        # mkstemp makes the file private (0600); an output gets the mode a plain open() gives.
        os.fchmod(fd, target.stat().st_mode & 0o777 if target.exists() else 0o666 & ~_umask())
        with os.fdopen(fd, "wb") as f:
            f.write(payload)
        _remember(target.absolute())
        os.replace(tmp, target)
    except OSError as exc:
        Path(tmp).unlink(missing_ok=True)
        raise InputError(f"cannot write {target}: {exc.strerror or exc}") from None
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return target


#: One input or output of a command: what it is (``"model"``, ``"--html"``) and its path.
Named = tuple[str, str | Path | None]


def _same(a: Path, b: Path) -> bool:
    """Same file, also through symlinks and hard links."""
    try:
        return a.resolve() == b.resolve() or (a.exists() and b.exists() and a.samefile(b))
    except OSError:
        return False


def _inside(path: Path, folder: Path) -> bool:
    try:
        return folder.is_dir() and path.resolve().is_relative_to(folder.resolve())
    except OSError:
        return False


def check_outputs(outputs: Iterable[Named], inputs: Iterable[Named]) -> None:
    """Refuse, before any work, outputs that would replace an input or each other, or that
    cannot be written: one :class:`UsageError` line naming both sides.

    Every command calls this with all its outputs (``-o``, ``--report``, ``--html``, ...) and
    all its inputs (model, data, profile files, project, baseline). An input folder (a
    SavedModel, an image folder) protects everything inside it: a new file there would be
    read back as data next time. Missing parent folders are made when the output is written
    (:func:`write_atomic`), so only the nearest existing one must be writable.
    """
    ins = list(dict.fromkeys((what, Path(p)) for what, p in inputs
                             if p is not None and str(p) != ""))
    seen: list[tuple[str, Path]] = []
    for what, raw in outputs:
        if raw is None or str(raw) == "":
            continue
        out = Path(raw)
        for in_what, source in ins:
            if _same(out, source):
                raise UsageError(f"{what} {out} would replace an input, the {in_what} {source}; "
                                 f"choose another output path")
            if _inside(out, source):
                raise UsageError(f"{what} {out} is inside an input, the {in_what} folder {source}; "
                                 f"write outputs elsewhere")
        for other_what, other in seen:
            if _same(out, other):
                raise UsageError(f"{what} and {other_what} are the same file {out}; "
                                 f"give each output its own path")
        seen.append((what, out))
        _check_writable(what, out)


def _check_writable(what: str, out: Path) -> None:
    if out.is_dir():
        raise UsageError(f"{what} {out} is a folder; give a file path")
    if out.exists() and not out.is_file():
        raise UsageError(f"{what} {out} is not a regular file; give a file path")
    folder = out.parent if str(out.parent) else Path(".")
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    if not folder.is_dir():
        raise UsageError(f"{what}: {folder} is not a folder")
    # Trying is the only honest test: permissions, read-only mounts and pseudo file systems
    # (/proc accepts nothing new even from root) all answer here.
    try:
        fd, probe = tempfile.mkstemp(dir=folder, prefix=".devicefit-probe-")
    except OSError as exc:
        raise UsageError(f"{what}: cannot write to the folder {folder} "
                         f"({exc.strerror or exc})") from None
    os.close(fd)
    os.unlink(probe)


@contextmanager
def temporary_folder(prefix: str) -> Iterator[Path]:
    """A private work folder, removed at the end whatever happens: a signal that arrives
    while it is being removed waits until it is gone (with ``TemporaryDirectory`` a SIGTERM
    in the middle of its removal left the folder half there)."""
    folder = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        yield folder
    finally:
        with deferred():
            shutil.rmtree(folder, ignore_errors=True)


#: The file that marks a folder as one devicefit wrote whole (``devicefit export``'s).
FOLDER_MARK = "manifest.json"


def check_output_folder(what: str, out: Path, inputs: Iterable[Named]) -> None:
    """Refuse, before any work, an output folder that is not devicefit's own (an existing
    folder with files but no :data:`FOLDER_MARK`), that holds or is inside an input, or
    whose parent cannot be written: one :class:`UsageError` line."""
    for in_what, source in inputs:
        if source is None or str(source) == "":
            continue
        src = Path(source)
        if _same(out, src) or _inside(src, out) or _inside(out, src):
            raise UsageError(f"{what} {out} would hold or replace an input, the {in_what} "
                             f"{src}; choose another folder")
    if out.exists() and not out.is_dir():
        raise UsageError(f"{what} {out} is not a folder")
    if out.is_dir() and any(out.iterdir()) and not (out / FOLDER_MARK).is_file():
        raise UsageError(f"{what} {out} has files devicefit did not write (no {FOLDER_MARK}); "
                         "give a new or empty folder")
    _check_writable(what, out.parent / ".devicefit-folder-probe")


def write_folder(out: Path, files: Mapping[str, str]) -> None:
    """Write ``files`` (relative path → text) as the folder ``out``, whole or not at all: built
    beside it, then renamed into place; an earlier folder of devicefit's at ``out`` is
    replaced (checked by :func:`check_output_folder` first)."""
    out = Path(out)
    _make_folder(out.parent)
    fresh = Path(tempfile.mkdtemp(prefix=f".{out.name}.devicefit-new-", dir=out.parent))
    old = out.with_name(f".{out.name}.devicefit-old-{os.getpid()}")
    try:
        for rel, text in files.items():
            path = fresh / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
        fresh.chmod(0o777 & ~_umask())
        with deferred():
            if out.exists():
                os.replace(out, old)
            os.replace(fresh, out)
    finally:
        shutil.rmtree(fresh, ignore_errors=True)
        shutil.rmtree(old, ignore_errors=True)
