"""The official SWE-bench 5.0.2 grading, run on cases from tests/integration/swebench_grading.rs.

Usage: python swebench_grade.py CASES.json  (prints one JSON list, a result per case)

The modules are the installed package's, unmodified. Only two things are arranged around
them, because swebench is installed without its dependencies (tests/python/
requirements-no-deps.txt): `swebench.harness` is registered as a bare package pointing at
its folder, so that importing `swebench.harness.grading` does not run
swebench/harness/__init__.py (which imports docker, modal and the dataset tooling);
and harness/utils.py's top-level import of `datasets` (pyarrow, pandas, the Hugging Face
hub), which the two functions used here (parse_eval_script, record_test_exit_code, via
make_test_spec) never call, is satisfied by an empty placeholder module.

A case is one of:
  {"kind": "grade", "log", "parser", "FAIL_TO_PASS", "PASS_TO_PASS", "eval_type"}
      The parser on the log as given (no file), then the whole of get_eval_report's path:
      the log written to a file and read back by get_logs_eval (Python's universal
      newlines included), get_eval_tests_report, get_resolution_status, and
      get_eval_report's labelling of infrastructure failures.
  {"kind": "eval_script", "eval_script"}
      TestSpec.eval_script of make_test_spec.
  {"kind": "tables"}
      Which characters this Python's `re` counts as \\s, \\d and \\w, as ranges.
"""

import importlib.util
import json
import os
import sys
import tempfile
import types


def _bare_package(name):
    spec = importlib.util.find_spec(name)
    module = types.ModuleType(name)
    module.__path__ = list(spec.submodule_search_locations)
    module.__spec__ = spec
    module.__file__ = spec.origin
    sys.modules[name] = module


import swebench  # noqa: E402  (its __init__ imports nothing eagerly)

_bare_package("swebench.harness")
if importlib.util.find_spec("datasets") is None:
    _placeholder = types.ModuleType("datasets")
    _placeholder.Dataset = _placeholder.load_dataset = _placeholder.load_from_disk = None
    sys.modules["datasets"] = _placeholder

from swebench.harness import grading  # noqa: E402
from swebench.harness.constants import EvalType, ResolvedStatus  # noqa: E402
from swebench.harness.log_parsers import PARSER_REGISTRY  # noqa: E402
from swebench.harness.utils import make_test_spec  # noqa: E402
from swebench.types import TestSpec  # noqa: E402

assert swebench.__version__ == "5.0.2", swebench.__version__


def _raised(e):
    return {"raised": f"{type(e).__name__}: {e}"}


def grade(case, folder):
    out = {}
    parser = PARSER_REGISTRY[case["parser"]]
    try:
        out["parse"] = list(parser(case["log"], None).items())
    except Exception as e:  # the official parser's own exception, reported
        out["parse"] = _raised(e)

    spec = TestSpec(
        instance_id="case",
        image="",
        eval_script_list=[],
        repo="",
        version="",
        FAIL_TO_PASS=case["FAIL_TO_PASS"],
        PASS_TO_PASS=case["PASS_TO_PASS"],
        log_parser=case["parser"],
        eval_type=case["eval_type"],
    )
    path = os.path.join(folder, "test_output.txt")
    # As run_instance writes test_output.txt: text mode, UTF-8, "\n" kept as is.
    with open(path, "w", encoding="utf-8") as f:
        f.write(case["log"])
    try:
        status_map, found = grading.get_logs_eval(spec, path)
    except Exception as e:
        out["grade"] = _raised(e)
        return out
    graded = {"valid": found, "statuses": list(status_map.items())}
    if found:
        # as get_eval_report does
        report = grading.get_eval_tests_report(
            status_map,
            {
                "instance_id": "case",
                "FAIL_TO_PASS": spec.FAIL_TO_PASS,
                "PASS_TO_PASS": spec.PASS_TO_PASS,
            },
            eval_type=EvalType(spec.eval_type),
        )
        resolution = grading.get_resolution_status(report)
        graded.update(
            {
                "f2p_success": report["FAIL_TO_PASS"]["success"],
                "f2p_failure": report["FAIL_TO_PASS"]["failure"],
                "p2p_success": report["PASS_TO_PASS"]["success"],
                "p2p_failure": report["PASS_TO_PASS"]["failure"],
                "resolution": resolution,
                "resolved": resolution == ResolvedStatus.FULL.value,
            }
        )
    else:
        graded["resolved"] = False
    # The whole official path once more, as one call: its verdict must agree.
    report = grading.get_eval_report(
        spec,
        {"instance_id": "case", "model_patch": "", "model_name_or_path": "m"},
        path,
        include_tests_status=False,
    )["case"]
    assert report["resolved"] == graded["resolved"], (report, graded)
    assert report["patch_successfully_applied"] == found, (report, graded)
    graded["infra_failure"] = report["infra_failure"]
    graded["infra_failure_reason"] = report.get("infra_failure_reason")
    out["grade"] = graded
    return out


def eval_script(case):
    spec = make_test_spec(
        {
            "instance_id": "case",
            "image": "",
            "repo": "",
            "version": "",
            "FAIL_TO_PASS": [],
            "PASS_TO_PASS": [],
            "log_parser": "parse_log_pytest",
            "eval_type": "pass_and_fail",
            "eval_script": case["eval_script"],
        }
    )
    return {"eval_script": spec.eval_script}


def tables():
    import re

    def ranges(pattern):
        found, start = [], None
        for c in range(0x110001):
            hit = c < 0x110000 and pattern.match(chr(c)) is not None
            if hit and start is None:
                start = c
            elif not hit and start is not None:
                found.append([start, c - 1])
                start = None
        return found

    return {
        "space": ranges(re.compile(r"\s")),
        "decimal": ranges(re.compile(r"\d")),
        "word": ranges(re.compile(r"\w")),
        "decimal_zero": [c for c in range(0x110000) if chr(c).isdecimal() and int(chr(c)) == 0],
    }


def main():
    with open(sys.argv[1], encoding="utf-8") as f:
        cases = json.load(f)
    results = []
    with tempfile.TemporaryDirectory() as folder:
        for case in cases:
            kind = case["kind"]
            if kind == "grade":
                results.append(grade(case, folder))
            elif kind == "eval_script":
                results.append(eval_script(case))
            elif kind == "tables":
                results.append(tables())
            else:
                raise SystemExit(f"unknown case kind {kind!r}")
    json.dump(results, sys.stdout, ensure_ascii=True)


if __name__ == "__main__":
    main()
