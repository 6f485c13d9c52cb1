// Checks that the committed dist/ is exactly what `npm run build` makes from src/ (ESM in dist/,
// CommonJS in dist/cjs/: scripts/build.mjs): builds to a temp dir the same way and compares every
// file both ways. Exit 1 (naming the files) if not.

import { mkdtempSync, readFileSync, readdirSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, relative } from "node:path";

import { build, root } from "./build.mjs";

const out = mkdtempSync(join(tmpdir(), "idem-client-dist-"));

function files(dir) {
  const found = [];
  const walk = (d) => {
    for (const name of readdirSync(d)) {
      const p = join(d, name);
      if (statSync(p).isDirectory()) walk(p);
      else found.push(relative(dir, p));
    }
  };
  walk(dir);
  return found.sort();
}

try {
  build(out);
  const built = files(out);
  const committed = files(join(root, "dist"));
  const problems = [];
  for (const f of built) {
    if (!committed.includes(f)) problems.push(`missing from dist/: ${f}`);
    else if (!readFileSync(join(out, f)).equals(readFileSync(join(root, "dist", f)))) problems.push(`stale: dist/${f}`);
  }
  for (const f of committed) if (!built.includes(f)) problems.push(`not built from src/ (remove it): dist/${f}`);
  if (problems.length > 0) {
    console.error(`dist/ is not up to date with src/ — run \`npm run build\` and commit dist/:\n  ${problems.join("\n  ")}`);
    process.exitCode = 1;
  } else {
    console.log(`dist/ is up to date with src/ (${built.length} files)`);
  }
} finally {
  rmSync(out, { recursive: true, force: true });
}
