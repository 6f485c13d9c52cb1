-- wrk script: 500-key batch lookups of keys that exist, as loaded by batch.lua with RUN=$RUN.
-- MAXC comes from batch.lua's summary: keys RUN-t-c-i exist for 2 <= c <= MAXC.
local threads = {}
function setup(thread)
  thread:set("tid", #threads + 1)
  table.insert(threads, thread)
end
function init(args)
  math.randomseed(tid * 7919 + os.time())
  run = os.getenv("RUN")
  maxc = tonumber(os.getenv("MAXC"))
  loaders = tonumber(os.getenv("LOADERS") or "2")
  wrk.method = "POST"
  wrk.headers["Content-Type"] = "application/json"
end
function request()
  local items = {}
  for i = 1, 500 do
    items[i] = string.format('{"key":"%s-%d-%d-%d"}', run, math.random(1, loaders), math.random(2, maxc), math.random(1, 500))
  end
  return wrk.format(nil, "/v1/claims/bench/lookup", nil, '{"items":[' .. table.concat(items, ",") .. ']}')
end
function response(status, headers, body)
  if status ~= 200 or not string.find(body, '"exists":true') or string.find(body, '"exists":false') then
    error("lookup of stored keys did not find them all: " .. status)
  end
end
