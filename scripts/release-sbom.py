#!/usr/bin/env python3
"""Writes the CycloneDX 1.5 SBOM (JSON) of the crates built into the idem binary, for
scripts/release.sh:

    release-sbom.py TARGET BINARY STAMP OUT

Which crates, and which depends on which: `cargo tree -e normal -p idem-server --target TARGET`,
the set `cargo build --release -p idem-server` compiles for that platform (normal dependencies,
proc-macros among them; not build scripts' or tests' dependencies). `cargo metadata`'s resolve is
not used for the set: it unifies the features of the whole workspace, and so names crates that
only another member or a test brings in (rand_core 0.6.4, through `signature`, in 0.1.0).
What each crate is: `cargo metadata --format-version 1` (license, description, repository) and
Cargo.lock (the SHA-256 of each crate from crates.io).

Each crate is a component with its name, version, purl `pkg:cargo/NAME@VERSION` (also its
bom-ref), its license expression (`MIT/Apache-2.0` written as `MIT OR Apache-2.0`) and, from
crates.io, its checksum; the workspace's own crates are marked `idem:source = workspace` (their
purls name no crates.io package). The binary is metadata.component, with its SHA-256. Nothing in
the document depends on the time or the checkout's path: the timestamp is STAMP (the commit's, in
Unix seconds) and the serial number is derived from the rest, so the same tree gives the same bytes.

Why not cargo-cyclonedx (0.5.9, the CycloneDX project's): `cargo install cargo-cyclonedx --locked`
took 5 min 35 s on the 2-core machine idem is developed on (160 s of CPU; #43), which every fresh
CI machine would pay again; and it writes a <crate>.cdx.json into each workspace crate's folder,
its bom-refs hold the checkout's absolute path (another folder, other bytes), and it lists
rand_core 0.6.4, which the binary does not hold. On the other 204 crates its components and this
script's agree: the same names, versions, license expressions and checksums.
"""

import datetime
import hashlib
import json
import pathlib
import re
import subprocess
import sys
import tomllib
import uuid

ROOT = pathlib.Path(__file__).resolve().parent.parent
CRATES_IO = "registry+https://github.com/rust-lang/crates.io-index"
TREE_LINE = re.compile(r"^(\d+)(\S+) v(\S+)")


def cargo(*args):
    return subprocess.run(["cargo", *args], cwd=ROOT, check=True, capture_output=True, text=True).stdout


def tree(target):
    """(packages, edges) of idem-server's normal dependencies: (name, version) pairs."""
    out = cargo("tree", "--locked", "-e", "normal", "-p", "idem-server", "--target", target,
                "--prefix", "depth", "--format", "{p}")
    packages, edges, stack = set(), set(), []
    for line in out.splitlines():
        m = TREE_LINE.match(line)
        if not m:
            continue
        depth, package = int(m.group(1)), (m.group(2), m.group(3))
        packages.add(package)
        del stack[depth:]
        if stack:
            edges.add((stack[-1], package))
        stack.append(package)
    return packages, edges


def license_of(package):
    expression = package.get("license")
    if expression:
        # The old crates.io style "MIT/Apache-2.0" is not an SPDX expression; it meant OR.
        return [{"expression": re.sub(r"\s*/\s*", " OR ", expression.strip())}]
    if package.get("license_file"):
        return [{"license": {"name": f"{package['name']}'s own license file ({package['license_file']})"}}]
    return None


def purl(name, version):
    return f"pkg:cargo/{name}@{version}"


def component(package, checksums, kind="library"):
    name, version = package["name"], package["version"]
    out = {"type": kind, "bom-ref": purl(name, version), "name": name, "version": version}
    if package.get("description"):
        out["description"] = " ".join(package["description"].split())
    licenses = license_of(package)
    if licenses:
        out["licenses"] = licenses
    out["purl"] = purl(name, version)
    checksum = checksums.get((name, version))
    if checksum:
        out["hashes"] = [{"alg": "SHA-256", "content": checksum}]
    references = []
    for field, kind_of in (("repository", "vcs"), ("homepage", "website"), ("documentation", "documentation")):
        url = package.get(field)
        if url and re.match(r"^https?://\S+$", url):
            references.append({"type": kind_of, "url": url})
    if references:
        out["externalReferences"] = references
    source = "crates.io" if package.get("source") == CRATES_IO else (
        "workspace" if package.get("source") is None else package["source"].split("+")[0])
    out["properties"] = [{"name": "idem:source", "value": source}]
    return out


def main():
    target, binary, stamp, out_path = sys.argv[1:5]
    metadata = json.loads(cargo("metadata", "--format-version", "1", "--locked", "--filter-platform", target))
    by_key = {(p["name"], p["version"]): p for p in metadata["packages"]}
    lock = tomllib.loads((ROOT / "Cargo.lock").read_text())
    checksums = {(p["name"], p["version"]): p["checksum"] for p in lock["package"] if p.get("checksum")}
    packages, edges = tree(target)
    missing = sorted(f"{n} {v}" for n, v in packages if (n, v) not in by_key)
    if missing:
        sys.exit(f"release-sbom.py: cargo tree names crates cargo metadata does not: {', '.join(missing)}")

    server = by_key[next(k for k in packages if k[0] == "idem-server")]
    subject = component(server, checksums, kind="application")
    subject["hashes"] = [{"alg": "SHA-256", "content": hashlib.sha256(pathlib.Path(binary).read_bytes()).hexdigest()}]
    subject["description"] = "the idem binary (crate idem-server)"
    components = [component(by_key[k], checksums) for k in sorted(packages) if k[0] != "idem-server"]
    depends = {}
    for parent, child in edges:
        depends.setdefault(purl(*parent), set()).add(purl(*child))
    dependencies = [{"ref": purl(*k), "dependsOn": sorted(depends.get(purl(*k), ()))} for k in sorted(packages)]

    when = datetime.datetime.fromtimestamp(int(stamp), datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    bom = {
        "$schema": "http://cyclonedx.org/schema/bom-1.5.schema.json",
        "bomFormat": "CycloneDX",
        "specVersion": "1.5",
        "version": 1,
        "metadata": {
            "timestamp": when,
            "tools": {"components": [{"type": "application", "name": "scripts/release-sbom.py",
                                      "description": "idem's release script: cargo tree and cargo metadata to CycloneDX"}]},
            "component": subject,
            "properties": [{"name": "idem:target", "value": target}],
        },
        "components": components,
        "dependencies": dependencies,
    }
    digest = hashlib.sha256(json.dumps(bom, sort_keys=True).encode()).hexdigest()
    serial = f"urn:uuid:{uuid.uuid5(uuid.NAMESPACE_URL, 'idem-sbom:' + digest)}"
    bom = {**dict(list(bom.items())[:3]), "serialNumber": serial, **dict(list(bom.items())[3:])}
    pathlib.Path(out_path).write_text(json.dumps(bom, indent=2) + "\n")
    print(f"release-sbom.py: {len(components)} crates and the binary, CycloneDX 1.5, in {out_path}", file=sys.stderr)


if __name__ == "__main__":
    main()
