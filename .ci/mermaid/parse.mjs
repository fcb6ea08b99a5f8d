// Mermaid's own parser over diagram texts: node parse.mjs MODULES_DIR < diagrams.json
//
// stdin: a JSON array of diagram texts. stdout: one JSON object, {"version": mermaid's
// version, "results": [...]}, one result per diagram in order: null where Mermaid parses
// it, else the parser's message. MODULES_DIR holds node_modules with the versions
// package-lock.json pins (.ci/setup-npm.sh mermaid installs them there).
//
// mermaid.parse runs the grammar, not the renderer, but mermaid's label sanitizer
// (DOMPurify) is created when mermaid loads and needs a window: linkedom provides one,
// set before mermaid is imported.
import { createRequire } from "node:module";
import { join } from "node:path";
import { pathToFileURL } from "node:url";

const dir = process.argv[2];
if (!dir) {
  console.error("usage: node parse.mjs MODULES_DIR < diagrams.json");
  process.exit(2);
}
const load = createRequire(join(dir, "package.json"));
const { parseHTML } = await import(pathToFileURL(load.resolve("linkedom")).href);
const { window } = parseHTML("<!doctype html><html><head></head><body></body></html>");
globalThis.window = window;
globalThis.document = window.document;
// Mermaid's own single-file bundle of the same version (dist/mermaid.esm.min.mjs, the build
// a page loads), not the package's default entry (dist/mermaid.core.mjs): that one imports
// d3, dagre, cytoscape and the rest as hundreds of separate modules, and resolving and
// compiling them took about 0.9 s of the run's 1.5 s of CPU; the bundle loads in about 0.3 s
// and parses every diagram alike.
const { default: mermaid } = await import(pathToFileURL(load.resolve("mermaid/dist/mermaid.esm.min.mjs")).href);
const { version } = load("mermaid/package.json");

let input = "";
for await (const chunk of process.stdin) input += chunk;
const results = [];
for (const text of JSON.parse(input)) {
  try {
    await mermaid.parse(text);
    results.push(null);
  } catch (error) {
    results.push(String((error && error.message) || error));
  }
}
process.stdout.write(JSON.stringify({ version, results }) + "\n");
