// An editor written with the official TypeScript ACP SDK, driving `coder-es acp`.
//
//   node client.mjs CWD COMMAND [ARGS...]
//
// Spawns COMMAND (the agent), runs initialize, session/new, a prompt, set_mode, a config
// option, session/list, close, resume, delete and list again through the SDK, whose schemas
// check every response and notification the agent sends, and prints what it saw as one JSON
// object on stdout (tests/clients/test_acp_ts_sdk.py checks it). Any rejection exits 1.
import { spawn } from "node:child_process";
import { Readable, Writable } from "node:stream";
import * as acp from "@agentclientprotocol/sdk";

const [cwd, command, ...args] = process.argv.slice(2);
const child = spawn(command, args, { stdio: ["pipe", "pipe", "inherit"] });
const stream = acp.ndJsonStream(Writable.toWeb(child.stdin), Readable.toWeb(child.stdout));
const m = acp.methods.agent;

// Reads a prompt turn's updates (the session queues them in arrival order) until it stops.
async function turn(session, text) {
  const reply = session.prompt(text);
  const updates = [];
  for (;;) {
    const message = await session.nextUpdate();
    if (message.kind === "stop") {
      await reply;
      return { stopReason: message.stopReason, updates };
    }
    updates.push(message.update);
  }
}

// Drains the updates already queued (those sent outside a prompt turn), waiting a moment.
async function queued(session, ms = 300) {
  const out = [];
  for (;;) {
    const next = await Promise.race([
      session.nextUpdate(),
      new Promise((resolve) => setTimeout(() => resolve(null), ms)),
    ]);
    if (next === null) return out;
    out.push(next.update);
  }
}

const seen = {};
try {
  await acp
    .client({ name: "coder-es-ts-sdk-test" })
    .onRequest(acp.methods.client.session.requestPermission, () => ({
      outcome: { outcome: "selected", optionId: "allow_once" },
    }))
    .connectWith(stream, async (ctx) => {
      const init = await ctx.request(m.initialize, {
        protocolVersion: acp.PROTOCOL_VERSION,
        clientCapabilities: { fs: { readTextFile: false, writeTextFile: false } },
        clientInfo: { name: "ts-sdk-test", version: "1" },
      });
      seen.protocolVersion = init.protocolVersion;
      seen.sessionCapabilities = Object.keys(init.agentCapabilities?.sessionCapabilities ?? {});
      seen.loadSession = init.agentCapabilities?.loadSession ?? false;

      const session = await ctx.buildSession(cwd).start();
      const sessionId = session.sessionId;
      seen.modes = session.modes;
      seen.configOptions = session.newSessionResponse.configOptions;

      const first = await turn(session, "hello");
      seen.stopReason = first.stopReason;
      seen.text = first.updates
        .filter((u) => u.sessionUpdate === "agent_message_chunk" && u.content.type === "text")
        .map((u) => u.content.text)
        .join("");
      seen.firstUpdates = first.updates.map((u) => u.sessionUpdate);
      seen.usage = first.updates.filter((u) => u.sessionUpdate === "usage_update");

      await ctx.request(m.session.setMode, { sessionId, modeId: "plan" });
      seen.afterSetMode = (await queued(session)).map((u) => ({
        kind: u.sessionUpdate,
        mode: u.currentModeId,
      }));
      const set = await ctx.request(m.session.setConfigOption, {
        sessionId,
        configId: "mode",
        value: "explore",
      });
      seen.setConfigOption = set.configOptions.map((o) => [o.id, o.currentValue]);
      seen.commands = (await queued(session, 100))
        .filter((u) => u.sessionUpdate === "available_commands_update")
        .map((u) => u.availableCommands.map((c) => c.name));

      const listed = await ctx.request(m.session.list, { cwd });
      seen.listed = listed.sessions.map((s) => s.sessionId === sessionId);
      seen.listedUpdatedAt = listed.sessions[0]?.updatedAt ?? null;

      await ctx.request(m.session.close, { sessionId });
      const resumed = await ctx.request(m.session.resume, { sessionId, cwd, mcpServers: [] });
      seen.resumedMode = resumed.modes?.currentModeId ?? null;
      await ctx.request(m.session.delete, { sessionId });
      seen.listedAfterDelete = (await ctx.request(m.session.list, { cwd })).sessions.length;
      seen.sessionId = sessionId;
      session.dispose();
    });
} catch (error) {
  console.error(`ts client: ${error?.stack ?? error}`);
  if (error?.data !== undefined) console.error(JSON.stringify(error.data));
  child.kill();
  process.exit(1);
}
child.stdin.end();
console.log(JSON.stringify(seen));
