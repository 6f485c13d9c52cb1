-- wrk script: 500-item batch claims, every key unique. Throughput in keys/s = requests/s * 500.
counter, thread_id = 0, 0
local threads = {}
function setup(thread)
  thread:set("tid", #threads + 1)
  table.insert(threads, thread)
end
function init(args)
  thread_id = tid
  run = os.getenv("RUN") or tostring(os.time())
  size = tonumber(os.getenv("BATCH") or "500")
  wrk.method = "POST"
  wrk.headers["Content-Type"] = "application/json"
end
function request()
  counter = counter + 1
  local items = {}
  for i = 1, size do
    items[i] = string.format('{"key":"%s-%d-%d-%d"}', run, thread_id, counter, i)
  end
  return wrk.format(nil, "/v1/claims/bench/batch", nil, '{"items":[' .. table.concat(items, ",") .. ']}')
end

-- Prints MAXC: every thread's batches 2..MAXC are surely stored, so lookup.lua can pick keys
-- that exist. Batch 1 of thread 1 is never sent (wrk calls request() once to check the script),
-- and the last batches of each thread may still have been in flight when wrk stopped.
function done(summary, latency, requests)
  local least = nil
  for _, t in ipairs(threads) do
    local c = t:get("counter")
    if least == nil or c < least then least = c end
  end
  io.write(string.format("MAXC=%d\n", math.max((least or 0) - 40, 2)))
end
