// Parses Terraform files with @cdktf/hcl2json (HashiCorp's HCL parser, built
// to WebAssembly) and lists every reference in every expression.
// Usage: node tf_refs.js FILE...   (NODE_PATH must reach @cdktf/hcl2json)
// Prints one JSON object: {file: {"error": msg} | {"body": parsed, "refs": [{ref, place}]}}.
"use strict";
const fs = require("fs");
const path = require("path");
const hcl = require("@cdktf/hcl2json");

async function refsIn(file, node, place, out) {
  if (typeof node === "string") {
    if (!node.includes("${")) return;
    let refs;
    try {
      refs = await hcl.getReferencesInExpression(path.basename(file), node);
    } catch (e) {
      out.push({ ref: null, place, error: String(e) });
      return;
    }
    for (const r of refs) out.push({ ref: r.value, place });
  } else if (Array.isArray(node)) {
    for (let i = 0; i < node.length; i++) await refsIn(file, node[i], place, out);
  } else if (node && typeof node === "object") {
    for (const [k, v] of Object.entries(node)) await refsIn(file, v, place ? place + "." + k : k, out);
  }
}

(async () => {
  const result = {};
  for (const file of process.argv.slice(2)) {
    try {
      const body = await hcl.parse(path.basename(file), fs.readFileSync(file, "utf8"));
      const refs = [];
      await refsIn(file, body, "", refs);
      result[file] = { body, refs };
    } catch (e) {
      result[file] = { error: String(e && e.message ? e.message : e) };
    }
  }
  process.stdout.write(JSON.stringify(result));
})();
