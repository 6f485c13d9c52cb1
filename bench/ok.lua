-- wrk script: the HTTP ceiling, a claim-sized POST to the built-in "ok" server (idem-bench upstream).
function init(args)
  wrk.method = "POST"
  wrk.path = "/ok"
  wrk.body = '{"parts":["ceiling","t1","k1"]}'
  wrk.headers["Content-Type"] = "application/json"
end
