"""Validates ATIF trajectory files with Harbor's own models.

    python validate_atif.py FILE.json...

Each file is read with the official `harbor.models.trajectories.Trajectory.model_validate`
(harbor 0.25.0, tests/python/requirements-no-deps.txt), the format's authority, then
dumped back with its own `to_json_dict()` (None values left out), which must give the
file again: a field Harbor does not know, a null written for "not recorded", or a value
Harbor would coerce (a number as a string) shows as a difference.

Harbor declares Python >= 3.12 and CI machines have 3.11, so tests/run.sh installs the
wheel with --no-deps --ignore-requires-python: the trajectory modules import only
pydantic and each other and use no syntax past 3.10, and `harbor/__init__.py` imports
the rest of Harbor lazily, so the models import unchanged under 3.11. The import below
is the proof: it fails loudly if a later Harbor changes that.

Prints one JSON object per file ({"file", "steps", "sources", "tool_calls",
"results"}); exits 1 naming the first file that fails.
"""

import json
import sys

from harbor.models.trajectories import Trajectory


def differences(a, b, path="$"):
    """Where two JSON values differ, as paths."""
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for k in sorted(set(a) | set(b)):
            if k not in a or k not in b:
                out.append(f"{path}.{k}: only in {'file' if k in a else 'harbor'}")
            else:
                out.extend(differences(a[k], b[k], f"{path}.{k}"))
        return out
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return [f"{path}: {len(a)} items in the file, {len(b)} from harbor"]
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in differences(x, y, f"{path}[{i}]")]
    if type(a) is not type(b) or a != b:
        return [f"{path}: {a!r} in the file, {b!r} from harbor"]
    return []


def main(files):
    for name in files:
        with open(name, encoding="utf-8") as f:
            data = json.load(f)
        try:
            trajectory = Trajectory.model_validate(data)
        except Exception as e:  # pydantic's ValidationError, or a model validator's
            print(f"{name}: not a valid ATIF trajectory: {e}", file=sys.stderr)
            return 1
        back = trajectory.to_json_dict()
        diff = differences(data, back)
        if diff:
            print(f"{name}: harbor reads it differently:\n  " + "\n  ".join(diff), file=sys.stderr)
            return 1
        print(
            json.dumps(
                {
                    "file": name,
                    "steps": len(trajectory.steps),
                    "sources": [s.source for s in trajectory.steps],
                    "tool_calls": sum(len(s.tool_calls or []) for s in trajectory.steps),
                    "results": sum(
                        len(s.observation.results) if s.observation else 0 for s in trajectory.steps
                    ),
                }
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
