// The official Mem0 TypeScript client (npm mem0ai) against a running `memcore serve`:
//   node mem0_client.mjs http://127.0.0.1:PORT TOKEN
// Prints one JSON object with what each call answered; tests/test_mem0_ts.py checks it.
import MemoryClient from "mem0ai";

const [host, apiKey] = process.argv.slice(2);
const client = new MemoryClient({ apiKey, host });
const out = {};

const added = await client.add([{ role: "user", content: "Erin sails on weekends" }], {
  user_id: "erin",
  metadata: { topic: "sport" },
});
out.added = added;
const id = added.results[0].id;
await client.add([{ role: "user", content: "Frank bakes bread" }], { user_id: "frank" });
out.search = await client.search("sailing", { filters: { user_id: "erin" } });
out.either = await client.getAll({
  filters: { OR: [{ user_id: "erin" }, { user_id: "frank" }] },
});
out.get = await client.get(id);
await client.update(id, { text: "Erin sails every weekend" });
out.history = await client.history(id);
out.users = await client.users();
out.batch = await client.batchUpdate([{ memoryId: id, text: "Erin sails often" }]);
out.after = await client.get(id);
try {
  await client.search("x", { filters: { user_id: { regex: "e.*" } } });
  out.bad = "accepted";
} catch (error) {
  out.bad = String(error.message || error);
}
out.deleteUsers = await client.deleteUsers({ userId: "frank" });
await client.delete(id);
out.left = await client.getAll({ filters: { user_id: "*" } });
console.log(JSON.stringify(out));
