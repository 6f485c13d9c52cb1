// Checks that the committed dist/ is exactly what `npm run build` makes from src/: compiles to a
// temp dir with the same tsconfig and compares every file both ways. Exit 1 (naming the files) if not.

import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, readdirSync, rmSync, statSync } from "node:fs";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import { dirname, join, relative, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const tsc = createRequire(import.meta.url).resolve("typescript/bin/tsc");
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
  execFileSync(process.execPath, [tsc, "-p", join(root, "tsconfig.json"), "--outDir", out], { stdio: "inherit" });
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
