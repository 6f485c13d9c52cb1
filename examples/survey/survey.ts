/**
 * Seed 000: a LINE bot survey where users tap an answer button several times.
 *
 * Every tap arrives as its own webhook, often at the same moment. The bot must save the answer once:
 * the first tap wins and the others are ignored. Each answer is claimed under the composite key
 * (scenario, user, node); the claim is atomic, so of any number of simultaneous taps exactly one is
 * told `claimed: true`, and only that one saves and replies.
 *
 * Two existence checks serve the bot's flow:
 *   - has this user answered this node?                 -> a lookup of (scenario, user, node)
 *   - has this user answered anything in this scenario? -> `exists` with the prefix (scenario, user)
 * The user comes before the node in the key so that the second question is a prefix, answered from
 * an index. The three webhook entry points (postback, message, quick reply) share one guard; an
 * admin's deliberate resend skips it.
 *
 * Run: `idem serve` (in another terminal), then `npm install && npm start` in examples/survey.
 * IDEM_URL (default http://127.0.0.1:7070) and IDEM_TOKEN point it elsewhere.
 */

import { Idem, IdemError, claimId } from "idem-client";

const idem = new Idem({ url: process.env.IDEM_URL ?? "http://127.0.0.1:7070", token: process.env.IDEM_TOKEN });
const NS = "survey";
// Each run is its own survey scenario, so the example can run again against the same idem: the
// claims of an earlier run stay (they are the record of who answered) and do not get in the way.
const SCENARIO = `scenario-${Date.now().toString(36)}-${Math.floor(Math.random() * 1e6).toString(36)}`;

type EntryPoint = "postback" | "message" | "quick_reply";
const saved: { user: string; node: string; answer: string }[] = [];

/** The guard every webhook entry point runs before saving an answer. */
async function answerOnce(via: EntryPoint, user: string, node: string, answer: string): Promise<void> {
  const { claimed, record } = await idem.claims.claim(NS, { parts: [SCENARIO, user, node], data: { answer, via } });
  if (claimed) {
    saved.push({ user, node, answer });
    console.log(`saved answer ${JSON.stringify(answer)} for ${user} at ${node} (via ${via})`);
  } else {
    const kept = (record.data as { answer: string }).answer;
    console.log(`ignored duplicate tap via ${via}: ${user} already answered ${JSON.stringify(kept)}`);
  }
}

function expect(condition: boolean, message: string): void {
  if (!condition) {
    console.error(`FAILED: ${message}`);
    process.exit(1);
  }
}

async function main(): Promise<void> {
  // A user taps "A" four times at once, through the three entry points.
  const taps: [EntryPoint, string][] = [["postback", "A"], ["postback", "A"], ["message", "A"], ["quick_reply", "A"]];
  await Promise.all(taps.map(([via, answer]) => answerOnce(via, "user-3", "node-2", answer)));
  expect(saved.length === 1, `exactly one of four simultaneous taps is saved, got ${saved.length}`);

  // A later, different tap on the same node is a duplicate too: the first answer stands.
  await answerOnce("postback", "user-3", "node-2", "B");
  expect(saved.length === 1, "a second answer to the same node is not saved");

  // The same user answering the next node is a new answer.
  await answerOnce("postback", "user-3", "node-3", "C");
  expect(saved.length === 2, "another node is another answer");

  // Existence checks by (scenario, user, node) and by (scenario, user).
  const found = await idem.claims.lookup(NS, [{ parts: [SCENARIO, "user-3", "node-2"] }, { parts: [SCENARIO, "user-4", "node-2"] }]);
  expect(found.map((r) => r.exists).join() === "true,false", `node lookups: ${JSON.stringify(found)}`);
  expect(found[0]?.id === claimId([SCENARIO, "user-3", "node-2"]), "ids computed locally equal the server's");
  const answered = await idem.claims.exists(NS, { prefix: [SCENARIO, "user-3"] });
  const silent = await idem.claims.exists(NS, { prefix: [SCENARIO, "user-4"] });
  expect(answered && !silent, "scenario-level checks");
  console.log(`user-3 has answered in ${SCENARIO}; user-4 has not`);

  // An admin resend is deliberate and goes around the guard.
  console.log(`admin resend of ${SCENARIO}/node-2 to user-3: sent without a guard`);
  console.log("ok");
}

/** What went wrong, in one line and what to do about it: no stack trace for the usual mistakes. */
function explain(error: unknown): string {
  const url = process.env.IDEM_URL ?? "http://127.0.0.1:7070";
  if (error instanceof IdemError && error.status === 0) {
    return `idem is not reachable at ${url}: start it with \`idem serve\` (or set IDEM_URL)`;
  }
  if (error instanceof IdemError && error.status === 401) {
    return process.env.IDEM_TOKEN
      ? `idem at ${url} does not know the token in IDEM_TOKEN: set IDEM_TOKEN to one of its [auth] tokens`
      : `idem at ${url} wants a token: set IDEM_TOKEN to one of its [auth] tokens (\`idem token new --can write\` makes one)`;
  }
  if (error instanceof IdemError && error.status === 403) {
    return `idem at ${url} refused: ${error.detail ?? error.message} (IDEM_TOKEN needs can = "write" on namespace ${NS})`;
  }
  return `FAILED: ${error instanceof IdemError ? error.message : String(error)}`;
}

main().catch((error: unknown) => {
  const message = explain(error);
  if (message.startsWith("FAILED") && !(error instanceof IdemError)) {
    console.error("FAILED:", error); // an unexpected error: its stack helps
  } else {
    console.error(message);
  }
  process.exit(1);
});
