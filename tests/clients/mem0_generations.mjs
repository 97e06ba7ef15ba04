// One session of a migrating app, run by either generation of the official TypeScript client:
//   node mem0_generations.mjs http://127.0.0.1:PORT TOKEN FOLDER
// FOLDER holds node_modules/mem0ai: tests/ts (3.x: v3 routes, camelCase options) or tests/ts-v2
// (2.x: v1 listing by query string, v2 listing and search with api_version "v2"). Prints one
// JSON object for tests/test_mem0_clients.py.
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { pathToFileURL } from "node:url";

const [host, apiKey, folder] = process.argv.slice(2);
const pkg = join(folder, "node_modules", "mem0ai");
const { version } = JSON.parse(readFileSync(join(pkg, "package.json"), "utf8"));
const { default: MemoryClient } = await import(pathToFileURL(join(pkg, "dist", "index.mjs")).href);
const v3 = Number(version.split(".")[0]) >= 3;
const client = new MemoryClient({ apiKey, host });
const out = {};
const rows = (answer) => answer.results ?? answer;
const add = (text, user) => client.add([{ role: "user", content: text }], { user_id: user });

const id = rows(await add("Gail sails on weekends", "gail"))[0].id;
for (let n = 0; n < 5; n++) await add(`Hank fact ${n}`, "hank");
const either = { OR: [{ user_id: "gail" }, { user_id: "hank" }] };
const page = v3
  ? await client.getAll({ filters: either, page: 2, pageSize: 4 })
  : await client.getAll({ filters: either, api_version: "v2", page: 2, page_size: 4 });
out.count = page.count;
out.pageTwo = page.results.length;
out.next = page.next;
if (!v3) {
  const v1 = await client.getAll({ user_id: "hank", page: 1, page_size: 2 });
  out.v1 = [v1.count, v1.results.length];
}
const found = await client.search("sails", {
  filters: { user_id: "gail" },
  ...(v3 ? {} : { api_version: "v2" }),
});
out.search = rows(found).map((r) => r.memory);
await client.update(id, { text: "Gail sails often" });
out.history = (await client.history(id)).map((e) => e.event);
try {
  await client.getWebhooks({ projectId: "default" });
  out.webhooks = "accepted";
} catch (error) {
  out.webhooks = String(error.message || error);
}
await client.delete(id);
await client.deleteAll({ user_id: "hank" });
const left = await client.getAll({ filters: either, ...(v3 ? {} : { api_version: "v2" }) });
out.left = rows(left).length;
console.log(JSON.stringify(out));
