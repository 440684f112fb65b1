// The checked-in types (src/openapi.ts) are what openapi-typescript makes
// of the document a live daemon serves: a field added to or renamed in memd
// fails here until `npm run generate` is run again and the result checked in.

import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { after, before, test } from "node:test";

import openapiTS, { astToString } from "openapi-typescript";

import { startDaemon, type Daemon } from "./daemon.js";

let daemon: Daemon;
before(async () => {
  daemon = await startDaemon();
});
after(async () => {
  await daemon?.stop();
});

test("the generated types are the live document's", async () => {
  const document = await (await fetch(`${daemon.url}/api/v1/openapi.json`)).json();
  const generated = astToString(await openapiTS(document, { defaultNonNullable: false }));
  const source = new URL("../../src/openapi.ts", import.meta.url);
  const checkedIn = readFileSync(source, "utf8");
  // The CLI adds a header comment; compare the declarations.
  const body = (text: string) => text.slice(text.indexOf("export "));
  assert.equal(body(checkedIn), body(generated), "run `npm run generate` against a fresh daemon");
});
