// An editor written with the official TypeScript ACP SDK, driving `coder-es acp --harness NAME`
// (coder-es as the ACP bridge in front of another agent CLI).
//
//   node harness_client.mjs CWD COMMAND [ARGS...]
//
// initialize, session/new, a prompt the harness answers with a file write and a shell command
// (each permission question answered allow_once and counted), the slash commands /tree and
// /search, set_mode plan and a second prompt; prints what it saw as one JSON object on stdout
// (tests/clients/test_acp_harness_bridge.py checks it). Any rejection exits 1.
import { spawn } from "node:child_process";
import { Readable, Writable } from "node:stream";
import * as acp from "@agentclientprotocol/sdk";

const [cwd, command, ...args] = process.argv.slice(2);
const child = spawn(command, args, { stdio: ["pipe", "pipe", "inherit"] });
const stream = acp.ndJsonStream(Writable.toWeb(child.stdin), Readable.toWeb(child.stdout));
const m = acp.methods.agent;

// One reader of the session's updates: a wait that timed out keeps its pending read, which the
// next reader takes over (a read left behind would swallow the next update).
let pending = null;
function next(session) {
  const out = pending ?? session.nextUpdate();
  pending = null;
  return out;
}

async function turn(session, text) {
  const reply = session.prompt(text);
  const updates = [];
  for (;;) {
    const message = await next(session);
    if (message.kind === "stop") {
      await reply;
      return { stopReason: message.stopReason, updates };
    }
    updates.push(message.update);
  }
}

async function queued(session, ms = 300) {
  const out = [];
  for (;;) {
    const reading = next(session);
    const got = await Promise.race([
      reading,
      new Promise((resolve) => setTimeout(() => resolve(null), ms)),
    ]);
    if (got === null) {
      pending = reading;
      return out;
    }
    out.push(got.update);
  }
}

const text = (updates) =>
  updates
    .filter((u) => u.sessionUpdate === "agent_message_chunk" && u.content.type === "text")
    .map((u) => u.content.text)
    .join("");

const seen = { asked: [] };
try {
  await acp
    .client({ name: "coder-es-ts-sdk-harness-test" })
    .onRequest(acp.methods.client.session.requestPermission, (...args) => {
      // The handler is given the request ({method, params, requestId, ...}).
      const params = args[0]?.params ?? {};
      seen.asked.push(params.toolCall?.title ?? "");
      return { outcome: { outcome: "selected", optionId: "allow_once" } };
    })
    .connectWith(stream, async (ctx) => {
      await ctx.request(m.initialize, {
        protocolVersion: acp.PROTOCOL_VERSION,
        clientCapabilities: { fs: { readTextFile: false, writeTextFile: false } },
        clientInfo: { name: "ts-sdk-harness-test", version: "1" },
      });
      const session = await ctx.buildSession(cwd).start();
      const sessionId = session.sessionId;
      seen.sessionId = sessionId;
      seen.modes = session.modes;
      seen.configOptions = (session.newSessionResponse.configOptions ?? []).map((o) => o.id);
      seen.commands = (await queued(session, 300))
        .filter((u) => u.sessionUpdate === "available_commands_update")
        .flatMap((u) => u.availableCommands.map((c) => c.name));

      const first = await turn(session, "write the notes and make the file");
      seen.stopReason = first.stopReason;
      seen.firstKinds = first.updates.map((u) => `${u.sessionUpdate}:${u.toolCallId ?? ""}:${u.title ?? ""}:${u.status ?? ""}`);
      seen.text = text(first.updates);
      seen.toolCalls = first.updates
        .filter((u) => u.sessionUpdate === "tool_call")
        .map((u) => u.title);
      seen.finished = first.updates
        .filter((u) => u.sessionUpdate === "tool_call_update" && u.status)
        .map((u) => u.status);

      seen.tree = text((await turn(session, "/tree")).updates);
      seen.search = text((await turn(session, "/search FAKE-ANSWER-7Q")).updates);

      await ctx.request(m.session.setMode, { sessionId, modeId: "plan" });
      seen.afterSetMode = (await queued(session)).map((u) => u.sessionUpdate);
      const second = await turn(session, "and now?");
      seen.secondStop = second.stopReason;
      seen.secondText = text(second.updates);
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
