-- wrk script: one durable claim per request, every key unique (thread id + counter), optionally
-- with a share of repeated keys: REPEAT=10 makes 10 % of requests reuse an earlier key.
local counter, thread_id = 0, 0
local threads = {}
function setup(thread)
  thread:set("tid", #threads + 1)
  table.insert(threads, thread)
end
function init(args)
  thread_id = tid
  repeat_pct = tonumber(os.getenv("REPEAT") or "0")
  run = os.getenv("RUN") or tostring(os.time())
  wrk.method = "POST"
  wrk.headers["Content-Type"] = "application/json"
end
function request()
  counter = counter + 1
  local n = counter
  if repeat_pct > 0 and counter % 100 < repeat_pct and counter > 100 then n = counter - 100 end
  local body = string.format('{"parts":["%s","t%d","k%d"]}', run, thread_id, n)
  return wrk.format(nil, "/v1/claims/bench", nil, body)
end
