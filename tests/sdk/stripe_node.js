// Stripe's official Node SDK (npm `stripe`, pinned in package.json) against idem's gateway: runs the
// calls of the plan on stdin, all at once, and prints what became of each: resolved (with the
// object's id, when it has one) or raised (the error's class, HTTP status, Stripe type and code),
// and how many HTTP requests the SDK sent, its own retries included. test_stripe.py drives it.
'use strict';

const fs = require('fs');
const Stripe = require('stripe');

/** Until the upstream has begun executing `key` (FakeStripe's /__started). */
async function waitStarted(upstream, key) {
  const deadline = Date.now() + 30000;
  while (Date.now() < deadline) {
    const res = await fetch(`${upstream}/__started?key=${encodeURIComponent(key)}`);
    if (res.status === 200) return;
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
  throw new Error(`${key} never started upstream`);
}

async function run(stripe, plan, call) {
  if (call.waitStarted) await waitStarted(plan.upstream, call.waitStarted);
  const options = {maxNetworkRetries: call.retries};
  if (call.key) options.idempotencyKey = call.key;
  try {
    const obj = await stripe[call.resource].create(call.params, options);
    return {outcome: 'resolved', id: obj.id ?? null, fields: Object.keys(obj).sort()};
  } catch (e) {
    return {
      outcome: 'raised',
      class: e.type ?? e.constructor.name,
      status: e.statusCode ?? null,
      type: (e.raw && e.raw.type) ?? null,
      code: e.code ?? null,
      message: e.message,
    };
  }
}

async function main() {
  const plan = JSON.parse(fs.readFileSync(0, 'utf8'));
  const stripe = new Stripe('sk_test_idem', {host: plan.host, port: plan.port, protocol: 'http'});
  let attempts = 0;
  stripe.on('request', () => {
    attempts += 1;
  });
  const results = await Promise.all(plan.calls.map((call) => run(stripe, plan, call)));
  // Exit once written: the SDK's kept-alive connections would hold the process open.
  process.stdout.write(JSON.stringify({results, attempts}), () => process.exit(0));
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
