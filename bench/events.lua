-- wrk script: event intake, every event id unique (thread id + counter).
local counter = 0
local threads = {}
function setup(thread)
  thread:set("tid", #threads + 1)
  table.insert(threads, thread)
end
function init(args)
  run = os.getenv("RUN") or tostring(os.time())
  wrk.method = "POST"
  wrk.headers["Content-Type"] = "application/json"
end
function request()
  counter = counter + 1
  local body = string.format('{"external_event_id":"%s-%d-%d","amount":42}', run, tid, counter)
  return wrk.format(nil, "/v1/sources/bench/events", nil, body)
end
