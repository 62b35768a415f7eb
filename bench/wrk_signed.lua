-- wrk script for bench/ingest.py: signed GitHub deliveries, each with a fresh X-GitHub-Delivery.
--
--   WRK_IDS_FILE=FILE WRK_DONE_DIR=DIR wrk -t T -c N -d S -s bench/wrk_signed.lua URL -- MANIFEST LIMIT RUN_ID
--
-- MANIFEST: one line per body, "event<TAB>sha256=<hex signature><TAB>body file". GitHub signs the
-- body only, so every delivery's own body is signed beforehand (by bench/senders.py; a repeated
-- body would be answered as a duplicate) and each request takes the next one with a fresh delivery id. LIMIT: responses per thread before the thread stops
-- (the count bound; wrk's -d is the time bound). RUN_ID: 8 hex digits that keep delivery ids
-- unique across runs on one database. WRK_IDS_FILE: where done() writes the todo ids of every 202,
-- one a line, so the caller can check that each acknowledged todo was stored (an environment
-- variable because done() runs in wrk's main Lua state, which init()'s arguments never reach).

local ffi = require("ffi")
ffi.cdef([[
  typedef struct { long tv_sec; long tv_nsec; } sb_timespec;
  int clock_gettime(int clk_id, sb_timespec *tp);
]])
local CLOCK_MONOTONIC = 1
local ts = ffi.new("sb_timespec")

-- wrk's own duration is always -d, even when every thread stopped early at its count bound, so
-- each thread keeps its own clock: from its first request to its last answer.
local function now()
  ffi.C.clock_gettime(CLOCK_MONOTONIC, ts)
  return tonumber(ts.tv_sec) + tonumber(ts.tv_nsec) / 1e9
end

local threads = {}

function setup(thread)
  thread:set("tid", #threads + 1)
  table.insert(threads, thread)
end

local bodies = {}
local limit = 0
local run_id = "00000000"

function init(args)
  local manifest = assert(io.open(args[1], "r"))
  for line in manifest:lines() do
    local event, signature, path = line:match("^([^\t]+)\t([^\t]+)\t(.+)$")
    local f = assert(io.open(path, "rb"))
    table.insert(bodies, { event = event, signature = signature, body = f:read("*a") })
    f:close()
  end
  manifest:close()
  limit = tonumber(args[2])
  run_id = args[3]
  -- Read back by done() through thread:get (wrk copies tables between Lua states).
  statuses = {}
  ids = {}
  created = 0
  sent = 0
  answered = 0
  first_at = nil
  elapsed = 0
  stopped = false
end

function request()
  if first_at == nil then
    first_at = now()
  end
  sent = sent + 1
  -- Each thread walks its own share of the bodies (every delivery a body of its own).
  local b = bodies[((tid - 1) * limit + sent - 1) % #bodies + 1]
  local headers = {
    ["Content-Type"] = "application/json",
    ["User-Agent"] = "GitHub-Hookshot/bench",
    ["X-GitHub-Event"] = b.event,
    ["X-GitHub-Delivery"] = string.format("%s-%04x-4000-8000-%012x", run_id, tid, sent),
    ["X-GitHub-Hook-ID"] = "1",
    ["X-Hub-Signature-256"] = b.signature,
  }
  return wrk.format("POST", nil, headers, b.body)
end

function response(status, headers, body)
  answered = answered + 1
  elapsed = now() - first_at
  statuses[status] = (statuses[status] or 0) + 1
  if status == 202 and body then
    local n = body:match('"created":%s*(%d+)')
    if n then
      created = created + tonumber(n)
    end
    for id in body:gmatch('"id":%s*"(td_[%w_%-]+)"') do
      table.insert(ids, id)
    end
  end
  if answered >= limit and not stopped then
    stopped = true
    -- Tell the caller this thread is done: wrk itself would wait out -d, so the caller sends it
    -- SIGINT (wrk then stops and reports as usual) once every thread has left such a file.
    local marker = io.open(os.getenv("WRK_DONE_DIR") .. "/thread-" .. tid, "w")
    if marker then
      marker:close()
    end
    wrk.thread:stop()
  end
end

local function json_statuses(t)
  local parts = {}
  for status, n in pairs(t) do
    table.insert(parts, string.format('"%d": %d', status, n))
  end
  return "{" .. table.concat(parts, ", ") .. "}"
end

function done(summary, latency, requests)
  local all_statuses = {}
  local total_created = 0
  local total_sent, total_answered, longest = 0, 0, 0
  local out = assert(io.open(os.getenv("WRK_IDS_FILE"), "w"))
  for _, thread in ipairs(threads) do
    for status, n in pairs(thread:get("statuses") or {}) do
      all_statuses[status] = (all_statuses[status] or 0) + n
    end
    total_created = total_created + (thread:get("created") or 0)
    total_sent = total_sent + (thread:get("sent") or 0)
    total_answered = total_answered + (thread:get("answered") or 0)
    longest = math.max(longest, thread:get("elapsed") or 0)
    for _, id in ipairs(thread:get("ids") or {}) do
      out:write(id, "\n")
    end
  end
  out:close()
  local e = summary.errors
  io.write(string.format(
    'WRKJSON {"duration_us": %d, "elapsed_s": %.6f, "sent": %d, "answered": %d, '
      .. '"requests": %d, "created": %d, "statuses": %s, '
      .. '"errors": {"connect": %d, "read": %d, "write": %d, "timeout": %d}, '
      .. '"p50_us": %d, "p99_us": %d, "max_us": %d, "mean_us": %.1f}\n',
    summary.duration, longest, total_sent, total_answered, summary.requests, total_created, json_statuses(all_statuses),
    e.connect, e.read, e.write, e.timeout,
    latency:percentile(50), latency:percentile(99), latency.max, latency.mean
  ))
end
