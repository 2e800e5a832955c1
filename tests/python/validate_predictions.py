"""Reads SWE-bench predictions files the way the official evaluation harness does.

    python validate_predictions.py --instances ID[,ID...] FILE.jsonl...

The harness (swebench 5.0.2, tests/python/requirements-no-deps.txt) takes predictions in
`swebench.harness.run_evaluation.main`: `get_predictions_from_file` (harness/utils.py)
reads the file and checks each line is an object with an instance_id; `main` keys them
by instance_id; `get_dataset_from_preds` (harness/run_evaluation.py) refuses a
prediction whose instance is not in the dataset, reads `model_name_or_path` (a string it
calls `.replace` on) and `model_patch` (an empty one is not evaluated); `run_instance`
writes `model_patch` to a file with `Path.write_text`.

Those two functions are run here as the package ships them, compiled from its own source
files: importing their modules would import `swebench.harness`, whose `__init__` pulls in
the Docker client, Modal and Hugging Face `datasets` (hundreds of MB, and a Docker
daemon's client for nothing). Their module-level names are given instead: `json` and
`Path` as imported there; the harness constants from its own constants module (it
imports only the standard library); and, for the dataset, an instance list of the given
ids (`load_instances` would fetch SWE-bench from the Hugging Face hub).

Prints one JSON object per file ({"file", "predictions", "evaluated", "models"}), where
"evaluated" are the instance ids the harness would run (non-empty patches); exits 1
naming the file on anything the harness would refuse.
"""

import argparse
import ast
import importlib.util
import json
import sys
import tempfile
from pathlib import Path


def official(ns):
    """The harness's predictions reader and filter, from the installed package's source."""
    spec = importlib.util.find_spec("swebench")
    if spec is None or spec.origin is None:
        raise SystemExit("swebench is not installed: run ./tests/run.sh")
    harness = Path(spec.origin).parent / "harness"
    constants = importlib.util.spec_from_file_location(
        "swebench_harness_constants", harness / "constants" / "__init__.py"
    )
    module = importlib.util.module_from_spec(constants)
    constants.loader.exec_module(module)
    ns["LOG_REPORT"] = module.LOG_REPORT
    for file, name in [
        ("utils.py", "get_predictions_from_file"),
        ("run_evaluation.py", "get_dataset_from_preds"),
    ]:
        path = harness / file
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        found = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name]
        if len(found) != 1:
            raise SystemExit(f"{path}: no function {name}: has the harness changed?")
        code = compile(ast.Module(body=found, type_ignores=[]), str(path), "exec")
        exec(code, ns)
    return ns["get_predictions_from_file"], ns["get_dataset_from_preds"]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--instances", required=True, help="the dataset's instance ids, comma-separated")
    parser.add_argument("files", nargs="+")
    args = parser.parse_args()
    dataset = [{"instance_id": i} for i in args.instances.split(",") if i]

    def load_swebench_dataset(*_args, **_kwargs):
        raise AssertionError("only the gold predictions read the dataset")

    with tempfile.TemporaryDirectory() as logs:
        ns = {
            "json": json,
            "Path": Path,
            # The harness's log folder (logs/run_evaluation), here an empty one: no
            # instance has been evaluated yet.
            "RUN_EVALUATION_LOG_DIR": Path(logs) / "run_evaluation",
            "load_instances": lambda *_args, **_kwargs: dataset,
            "load_swebench_dataset": load_swebench_dataset,
        }
        read, filter_dataset = official(ns)
        for name in args.files:
            try:
                preds = read(name, "SWE-bench/SWE-bench", "test")
                keyed = {pred["instance_id"]: pred for pred in preds}
                if len(keyed) != len(preds):
                    raise ValueError("an instance_id appears twice: the harness would keep only the last")
                evaluated = filter_dataset(
                    "SWE-bench/SWE-bench", "test", [], keyed, "export-test", False
                )
                for instance in evaluated:
                    pred = keyed[instance["instance_id"]]
                    # run_instance: the log folder's name and the patch file.
                    model = pred.get("model_name_or_path", "None").replace("/", "__")
                    patch = Path(logs) / model / instance["instance_id"] / "patch.diff"
                    patch.parent.mkdir(parents=True, exist_ok=True)
                    patch.write_text(pred["model_patch"] or "")
                for pred in preds:
                    if set(pred) != {"instance_id", "model_name_or_path", "model_patch"}:
                        raise ValueError(f"keys {sorted(pred)}")
                    if not all(isinstance(v, str) for v in pred.values()):
                        raise ValueError(f"a value that is not a string: {pred!r:.200}")
            except Exception as e:
                print(f"{name}: the SWE-bench harness would refuse it: {type(e).__name__}: {e}", file=sys.stderr)
                return 1
            print(
                json.dumps(
                    {
                        "file": name,
                        "predictions": sorted(keyed),
                        "evaluated": sorted(i["instance_id"] for i in evaluated),
                        "models": sorted({p["model_name_or_path"] for p in preds}),
                    }
                )
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
