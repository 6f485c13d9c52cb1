#!/usr/bin/env python3
"""The house rules a reader relies on (docs/house-style.md), checked on the product's code: the
crates' src/ outside test modules, without the harnesses (idem-bench, idem-conformance, idem-sim)
and the simulated disk (idem-log's sim.rs, built only for tests).

- no function longer than 60 lines;
- at most 10 `Result<_, String>` (a typed error where a caller acts on it);
- no metric name written outside the catalogue (crates/idem-metrics);
- no `/v1/...` path in the permission code (web/auth.rs reads the route table).

Prints what breaks a rule and exits 1, or one line of figures and exits 0.
"""

import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
HARNESSES = {"idem-bench", "idem-conformance", "idem-sim"}
MAX_FUNCTION_LINES = 60
MAX_STRING_RESULTS = 10

FN = re.compile(r"^\s*(pub(\([^)]*\))?\s+)?(const\s+)?(async\s+)?(unsafe\s+)?(extern\s+\"C\"\s+)?fn\s+(\w+)")
STRING_RESULT = re.compile(r"Result<[^;{]*,\s*String>")
METRIC_NAME = re.compile(r"\"idem_[a-z0-9_]+(_total|_seconds|_bytes|_commands|_items|_calls|_responses|_info|_due|_stored|receipts)\"")


def product_files():
    for path in sorted((ROOT / "crates").glob("*/src/**/*.rs")):
        crate = path.relative_to(ROOT / "crates").parts[0]
        if crate in HARNESSES or (crate == "idem-log" and path.name == "sim.rs"):
            continue
        yield crate, path


def without_tests(lines):
    """The lines outside `#[cfg(test)]` items, as (number, text); the rest become blank."""
    out, skip_depth, pending = [], None, False
    depth = 0
    for number, line in enumerate(lines, 1):
        stripped = line.strip()
        opens, closes = line.count("{"), line.count("}")
        if skip_depth is None and stripped.startswith("#[cfg(test)]"):
            pending = True
            out.append((number, ""))
            continue
        if pending and skip_depth is None:
            if opens:
                skip_depth = depth
                pending = False
            elif stripped.endswith(";"):
                pending = False
                out.append((number, ""))
                continue
        depth += opens - closes
        if skip_depth is not None:
            out.append((number, ""))
            if depth <= skip_depth:
                skip_depth = None
            continue
        out.append((number, line))
    return out


def long_functions(path, numbered):
    found = []
    for i, (number, line) in enumerate(numbered):
        match = FN.match(line)
        if not match or line.rstrip().endswith(";"):
            continue
        depth, started = 0, False
        for _, text in numbered[i:]:
            depth += text.count("{") - text.count("}")
            started = started or "{" in text
            if started and depth <= 0:
                end = _
                break
            if not started and text.rstrip().endswith(";"):
                end = None
                break
        else:
            end = None
        if end is not None and end - number + 1 > MAX_FUNCTION_LINES:
            found.append(f"{path.relative_to(ROOT)}:{number}: fn {match.group(7)} is {end - number + 1} lines")
    return found


def main():
    problems, string_results, functions = [], [], 0
    for crate, path in product_files():
        numbered = without_tests(path.read_text().splitlines())
        functions += sum(1 for _, l in numbered if FN.match(l))
        problems += long_functions(path, numbered)
        for number, line in numbered:
            if line.lstrip().startswith("//"):
                continue
            if STRING_RESULT.search(line):
                string_results.append(f"{path.relative_to(ROOT)}:{number}")
            if crate != "idem-metrics" and METRIC_NAME.search(line):
                problems.append(f"{path.relative_to(ROOT)}:{number}: a metric name outside crates/idem-metrics")
            if path.name == "auth.rs" and path.parent.name == "web" and '"/v1/' in line:
                problems.append(f"{path.relative_to(ROOT)}:{number}: a /v1 path in the permission code")
    if len(string_results) > MAX_STRING_RESULTS:
        problems.append(f"{len(string_results)} Result<_, String> (at most {MAX_STRING_RESULTS}):")
        problems += [f"  {place}" for place in string_results]
    if problems:
        print("house rules broken:")
        print("\n".join(problems))
        return 1
    print(f"house rules kept: {functions} functions of at most {MAX_FUNCTION_LINES} lines, "
          f"{len(string_results)} Result<_, String>, metric names only in the catalogue")
    return 0


if __name__ == "__main__":
    sys.exit(main())
