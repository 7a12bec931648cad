"""devicefit's per-operator GPU verdicts against TensorFlow Lite's own GPU compatibility checks.

Three tools here claim to check a model for the GPU delegate:

- LiteRT's model analyzer (``ai-edge-litert``: ``_pywrap_analyzer_wrapper.ModelAnalyzer(path,
  True, True)``), which prints ``GPU COMPATIBILITY WARNING`` per incompatible node;
- TensorFlow's (``tf.lite.experimental.Analyzer.analyze(..., gpu_compatibility=True)``, the
  ``convert`` extra's TensorFlow);
- TensorFlow's converter with ``target_spec.experimental_supported_backends = ["GPU"]``,
  which is meant to fail a conversion naming each op that "is not GPU compatible".

Each is asked in one child process (TensorFlow's in one, for all models) on every model of
the test zoo and the public corpus; devicefit's verdict per operator (``targets.gpu.rules``,
the delegate's parsers and tensor checks, cited there) is set beside it. Every operator
devicefit refuses that a tool calls compatible is a disagreement, listed by model. The live
delegate's partition against devicefit's is ``probe_gpu_paths.py --corpus``.

    PYTHONPATH=. .venv/bin/python benchmarks/bench_gpu_analyzer.py
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.probe_gpu_paths import corpus_models, zoo_models  # noqa: E402
from devicefit.simulator.read.model import Model  # noqa: E402
from devicefit.simulator.read.reader import read_model  # noqa: E402
from devicefit.simulator.targets.gpu.rules import verdict  # noqa: E402

#: Asks an analyzer about each path of argv; prints one JSON line per model: the nodes it
#: warns about per subgraph, whether it calls the model compatible, or the error it raised.
ASK = """
import contextlib, io, json, re, sys
def litert(path):
    from ai_edge_litert import _pywrap_analyzer_wrapper as w
    return w.ModelAnalyzer(path, True, True)
def tensorflow(path):
    import tensorflow as tf
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        tf.lite.experimental.Analyzer.analyze(model_path=path, gpu_compatibility=True)
    return out.getvalue()
ask = {"litert": litert, "tensorflow": tensorflow}[sys.argv[1]]
for path in sys.argv[2:]:
    try:
        text = ask(path)
    except Exception as e:
        print(json.dumps({"path": path, "error": str(e).splitlines()[0][:200]}), flush=True)
        continue
    nodes = {m.group(1): [int(n) for n in m.group(2).split(",")] for m in re.finditer(
        r"GPU COMPATIBILITY WARNING: Subgraph#(\\d+) has GPU delegate compatibility issues "
        r"(?:at|with) nodes ([\\d, ]+)", text)}
    print(json.dumps({"path": path, "warned": nodes,
                      "compatible": "looks compatible with GPU delegate" in text}), flush=True)
"""

#: Models the converter writes with the GPU check on: an int32 ADD (the delegate's tensor
#: check refuses int32 there) and TOPK_V2 (no parser in the delegate).
CONVERT = """
import json, sys
import tensorflow as tf
@tf.function(input_signature=[tf.TensorSpec([1, 8], tf.float32)])
def int32_add(x):
    return x * 2.0 + tf.cast(tf.cast(x, tf.int32) + 3, tf.float32)
@tf.function(input_signature=[tf.TensorSpec([1, 8], tf.float32)])
def topk(x):
    return tf.math.top_k(x * 2.0, k=2).values
for name, f in (("int32_add", int32_add), ("topk", topk)):
    conv = tf.lite.TFLiteConverter.from_concrete_functions([f.get_concrete_function()], f)
    conv.target_spec.experimental_supported_backends = ["GPU"]
    try:
        data = conv.convert()
    except Exception as e:
        print(json.dumps({"name": name, "error": str(e)[-300:]}), flush=True)
        continue
    path = sys.argv[1] + "/" + name + ".tflite"
    open(path, "wb").write(data)
    print(json.dumps({"name": name, "path": path}), flush=True)
"""


def ask(tool: str, paths: list[Path]) -> dict[str, dict]:
    done = subprocess.run([sys.executable, "-c", ASK, tool, *map(str, paths)],
                          capture_output=True, text=True, timeout=1800,
                          env={"TF_CPP_MIN_LOG_LEVEL": "3", "PATH": "/usr/bin:/bin"})
    answers = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    if not answers:
        raise SystemExit(f"the {tool} analyzer gave no answer (exit {done.returncode}): "
                         f"{done.stderr.strip().splitlines()[-1:] or ''}")
    return {a["path"]: a for a in answers}


def refused(model: Model) -> list[str]:
    """devicefit's refusals in every subgraph: ``op_name: reason`` of each operator."""
    return [f"{op.op_name}: {v.reason}" for sg in model.subgraphs for op in sg.operators
            if not (v := verdict(sg, op)).supported]


def main() -> int:
    models = zoo_models() + corpus_models()
    litert, tensorflow = ask("litert", models), ask("tensorflow", models)
    print("| model | ops | devicefit refuses | LiteRT's analyzer | TensorFlow's analyzer |\n"
          "|---|---:|---|---|---|")
    ops = disagreeing = refusing_models = 0
    kinds: Counter[str] = Counter()
    said = {"litert": Counter[str](), "tensorflow": Counter[str]()}
    for path in models:
        model = read_model(path)
        n_ops = sum(len(sg.operators) for sg in model.subgraphs)
        mine = refused(model)
        ops += n_ops
        refusing_models += bool(mine)
        cells = []
        for tool, answers in (("litert", litert), ("tensorflow", tensorflow)):
            a = answers.get(str(path), {"error": "no answer"})
            if "error" in a:
                said[tool]["error"] += 1
                cells.append(f"error: {a['error'][:60]}")
                continue
            warned = sum(len(v) for v in a["warned"].values())
            said[tool]["compatible" if a["compatible"] else "warned"] += 1
            cells.append("compatible" if a["compatible"] else f"{warned} node(s) warned")
            if tool == "litert" and a["compatible"]:
                disagreeing += len(mine)
        kinds.update(r.split(":")[0] for r in mine)
        types = ", ".join(f"{k} ×{n}" for k, n in Counter(r.split(":")[0] for r in mine).items())
        print(f"| {path.stem} | {n_ops} | {len(mine)}{': ' + types if types else ''} | "
              f"{cells[0]} | {cells[1]} |")
    by_kind = ", ".join(f"{k} ×{n}" for k, n in kinds.most_common())
    print(f"\n{len(models)} models, {ops} operators; devicefit refuses {sum(kinds.values())} "
          f"operators in {refusing_models} models ({by_kind})")
    for tool, counts in said.items():
        print(f"{tool} analyzer: " + ", ".join(f"{k} {n}" for k, n in counts.items()))
    print("operators devicefit refuses in models LiteRT's analyzer calls compatible: "
          f"{disagreeing}")
    with tempfile.TemporaryDirectory() as tmp:
        done = subprocess.run([sys.executable, "-c", CONVERT, tmp], capture_output=True,
                              text=True, timeout=900,
                              env={"TF_CPP_MIN_LOG_LEVEL": "3", "PATH": "/usr/bin:/bin"})
        for line in done.stdout.splitlines():
            if not line.startswith("{"):
                continue
            c = json.loads(line)
            if "error" in c:
                print(f"converter, GPU check on, {c['name']}: failed: {c['error']}")
                continue
            mine = refused(read_model(Path(c["path"])))
            print(f"converter, GPU check on, {c['name']}: converted without a GPU error; "
                  f"devicefit refuses {len(mine)}: {'; '.join(mine)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
