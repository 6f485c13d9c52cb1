-- wrk script for the gateway: POST /orders with an Idempotency-Key.
--   MODE=first   every request a new key (first executions)
--   MODE=replay  keys cycle through KEYS (default 1000) already completed (replays)
--   MODE=none    no key at all (for the upstream measured directly)
local counter = 0
local threads = {}
function setup(thread)
  thread:set("tid", #threads + 1)
  table.insert(threads, thread)
end
function init(args)
  mode = os.getenv("MODE") or "first"
  keys = tonumber(os.getenv("KEYS") or "1000")
  run = os.getenv("RUN") or tostring(os.time())
  wrk.method = "POST"
  wrk.body = '{"item":"book","qty":1}'
  wrk.headers["Content-Type"] = "application/json"
end
function request()
  counter = counter + 1
  local headers = nil
  if mode == "first" then
    headers = {["Idempotency-Key"] = string.format('"%s-%d-%d"', run, tid, counter)}
  elseif mode == "replay" then
    headers = {["Idempotency-Key"] = string.format('"replay-%d"', counter % keys)}
  end
  return wrk.format(nil, "/orders", headers, nil)
end
