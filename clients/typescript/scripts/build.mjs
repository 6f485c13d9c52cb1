// `npm run build`: src/ → dist/ twice, for both kinds of project that install the package.
//
//   dist/*.js, dist/*.d.ts          ESM (tsconfig.json), what `import` loads
//   dist/cjs/*.js, dist/cjs/*.d.ts  CommonJS (tsconfig.cjs.json), what `require` loads, with a
//                                   dist/cjs/package.json saying so ({"type": "commonjs"})
//
// package.json's `exports` sends each condition (and its types) to its own folder.
// scripts/check-dist.mjs builds the same into a temp dir and compares it with the committed dist/.

import { execFileSync } from "node:child_process";
import { mkdirSync, rmSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

export const root = resolve(dirname(fileURLToPath(import.meta.url)), "..");

/** The marker that makes Node (and TypeScript) read dist/cjs/*.js and *.d.ts as CommonJS. */
export const CJS_PACKAGE_JSON = '{\n  "type": "commonjs"\n}\n';

/** Builds both outputs into `out` (emptied first). */
export function build(out) {
  const tsc = createRequire(import.meta.url).resolve("typescript/bin/tsc");
  rmSync(out, { recursive: true, force: true });
  execFileSync(process.execPath, [tsc, "-p", join(root, "tsconfig.json"), "--outDir", out], { stdio: "inherit" });
  const cjs = join(out, "cjs");
  execFileSync(process.execPath, [tsc, "-p", join(root, "tsconfig.cjs.json"), "--outDir", cjs], { stdio: "inherit" });
  mkdirSync(cjs, { recursive: true });
  writeFileSync(join(cjs, "package.json"), CJS_PACKAGE_JSON);
}

if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  build(join(root, "dist"));
}
