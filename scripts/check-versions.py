#!/usr/bin/env python3
"""One version for the server, the four clients and what ships with them (contract §11).

Reads scripts/versions.txt (every file that holds a copy of the version, and how to find it there)
and checks that every copy equals the first. Prints `--- PASS: versions` or `--- FAIL: versions`
with one line per copy that differs, and `--- SKIP: versions/clients/NAME` for a client whose
directory does not exist yet: the lines scripts/test.sh counts. Exit status 1 on a mismatch.
"""

import glob
import json
import re
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LIST = ROOT / "scripts" / "versions.txt"


def copies(text: str, how: str) -> list[str]:
    """The version strings `how` finds in `text` (none when it finds nothing)."""
    kind, _, spec = how.partition(":")
    if kind == "re":
        return [m.group(1) for m in re.finditer(spec, text)]
    if kind == "toml":
        value = tomllib.loads(text)
        for key in spec.split("."):
            value = value.get(key, {}) if isinstance(value, dict) else {}
        return [value] if isinstance(value, str) else []
    if kind == "json":
        value = json.loads(text)
        for key in spec.split("/")[1:]:
            value = value.get(key, {}) if isinstance(value, dict) else {}
        return [value] if isinstance(value, str) else []
    raise SystemExit(f"{LIST}: unknown kind {kind!r} in {how!r}")


def entries() -> list[tuple[str, str]]:
    lines = LIST.read_text().splitlines()
    rows = [line.split("\t", 1) for line in lines if line.strip() and not line.startswith("#")]
    for row in rows:
        if len(row) != 2:
            raise SystemExit(f"{LIST}: not 'path<TAB>how': {row}")
    return [(path, how.replace("\\n", "\n")) for path, how in rows]


def not_landed(pattern: str) -> str | None:
    """clients/NAME when the pattern is under a client directory that does not exist yet."""
    parts = Path(pattern).parts
    if len(parts) > 2 and parts[0] == "clients" and not (ROOT / parts[0] / parts[1]).is_dir():
        return f"clients/{parts[1]}"
    return None


def check(path: str, how: str, version: str | None) -> tuple[str | None, list[str]]:
    """The version found (the first, when `version` is None) and what is wrong with this entry."""
    files = sorted(glob.glob(str(ROOT / path)))
    found = [(f, v) for f in files for v in copies(Path(f).read_text(), how)]
    if not files:
        return None, [f"{path}: no such file"]
    holders = {f for f, _ in found}
    if not found:
        return None, [f"{path}: no version found by {how!r}"]
    if len(holders) > 1:
        return None, [f"{path}: the version is in {len(holders)} files, expected one: {sorted(holders)}"]
    version = version or found[0][1]
    wrong = [f"{Path(f).relative_to(ROOT)}: {v} (expected {version})" for f, v in found if v != version]
    return version, wrong


def main() -> int:
    version, problems, skipped = None, [], set()
    for path, how in entries():
        client = not_landed(path)
        if client:
            skipped.add(client)
            continue
        found, wrong = check(path, how, version)
        version = version or found
        problems += wrong
        if not wrong:
            print(f"    {path}: {found}")
    for client in sorted(skipped):
        print(f"--- SKIP: versions/{client} ({client} does not exist yet; its lines in scripts/versions.txt wait for it)")
    if problems:
        print("\n".join(f"    {p}" for p in problems))
        print("--- FAIL: versions")
        return 1
    print(f"--- PASS: versions (all {version})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
