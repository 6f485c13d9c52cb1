// Compiled (never run) by `npm run typecheck`: the published declarations, used the way the contract
// shows, type-check under strict settings. Lines marked @ts-expect-error must fail to compile.

import {
  Idem,
  IdemError,
  InProgressError,
  LeaseLostError,
  MismatchError,
  UnavailableError,
  WebhookVerificationError,
  PROBLEM_OUTCOME_UNKNOWN,
  claimId,
  verifyWebhook,
  type ClaimPage,
  type ClaimRecord,
  type ReceiptPage,
} from "../dist/index.js";

declare const env: Record<string, string | undefined>;

export async function usage(): Promise<void> {
  const idem = new Idem({ url: "http://127.0.0.1:7070", token: env["IDEM_TOKEN"], timeoutMs: 5000, retries: 2, fetch });
  const r = await idem.claims.claim<{ answer: string }>("survey", { parts: ["scenario-1", "user-3", "node-2"], data: { answer: "A" } });
  const claimed: boolean = r.claimed;
  const id: string = r.record.id;
  const answer: string | undefined = r.record.data?.answer;
  const expires: string | null = r.record.expires_at;
  void [claimed, id, answer, expires];

  const batch = await idem.claims.claimBatch("articles", [{ key: "https://example.com/a" }, { key: "b", ttlSeconds: 60 }], { clientToken: "round-7" });
  await idem.claims.claim("survey", { key: "k", clientToken: "tap-7" });
  await idem.operations.run("orders", { key: "k", clientToken: "order-7" }, () => 1);
  batch.forEach((b) => b.record.created_at.toUpperCase());
  const found = await idem.claims.lookup("articles", [{ key: "https://example.com/a" }]);
  const rec: ClaimRecord | undefined = found[0]?.record;
  void rec;
  const any: boolean = await idem.claims.exists("survey", { prefix: ["scenario-1", "user-3"] });
  void any;
  const fromEnv = new Idem();
  const claimPage: ClaimPage<{ answer: string }> = await fromEnv.claims.list("survey", { prefix: ["scenario-1"], limit: 50, after: null });
  const nextPage: string | null = claimPage.next;
  for await (const a of idem.claims.iterate<{ answer: string }>("survey", { prefix: ["scenario-1"], pageSize: 500 })) a.data?.answer.toUpperCase();
  const removed: number = await idem.claims.deletePrefix("survey", { prefix: ["scenario-1", "user-3"] });
  void [nextPage, removed, new Idem({ token: null })];
  // @ts-expect-error a prefix is required
  await idem.claims.list("survey", {});
  const notIdem: boolean = new IdemError({ status: 404 }).notIdem;
  void notIdem;
  const got: ClaimRecord | null = await idem.claims.get("survey", { parts: ["a"] });
  const byId = await idem.claims.get("survey", claimId(["a"]));
  const deleted: boolean = await idem.claims.delete("survey", { parts: ["a"] });
  void [got, byId, deleted];

  // @ts-expect-error key and parts together
  await idem.claims.claim("survey", { key: "a", parts: ["a"] });
  // @ts-expect-error a key is required
  await idem.claims.claim("survey", { data: 1 });

  const order: { orderId: number } = await idem.operations.run("orders", { key: "k", request: { sku: 1 }, leaseSeconds: 30 }, async ({ signal }) => {
    signal.throwIfAborted();
    return { orderId: 1 };
  });
  void order;
  const begun = await idem.operations.begin("orders", { key: "k", waitSeconds: 5, clientToken: "job-7" });
  if (begun.status === "started") {
    const fence: number = begun.fence;
    void fence;
    await idem.operations.extend("orders", begun.id, begun.token, 60);
    await idem.operations.complete("orders", begun.id, begun.token, { ok: true });
  } else {
    const result: unknown = begun.result;
    void result;
  }

  const page: ReceiptPage = await idem.receipts.list({ status: "dead" });
  const next: string | null = page.nextCursor;
  void next;
  for (const receipt of page.items) await idem.receipts.replay(receipt.id);
  const receipt = await idem.receipts.get("rcpt_x");
  void receipt?.attempts?.[0]?.status_code;

  const payload = verifyWebhook<{ external_event_id: string }>("whsec_…", new Headers(), "{}");
  const ev: string = payload.external_event_id;
  void ev;
  verifyWebhook("whsec_…", { "webhook-id": "x", "Webhook-Signature": ["a", "b"] }, new Uint8Array(), { now: new Date() });

  try {
    await idem.claims.claim("x", { key: "y" });
  } catch (e) {
    if (e instanceof UnavailableError && e.type === PROBLEM_OUTCOME_UNKNOWN) void e.retryAfterSeconds;
    if (e instanceof InProgressError || e instanceof MismatchError || e instanceof UnavailableError || e instanceof LeaseLostError) {
      const s: number = e.status;
      void s;
    }
    if (e instanceof IdemError) {
      const parts: [number, string, string, string | undefined, string | undefined] = [e.status, e.type, e.title, e.detail, e.field];
      void parts;
    }
    if (e instanceof WebhookVerificationError) void e.message;
  }
}
