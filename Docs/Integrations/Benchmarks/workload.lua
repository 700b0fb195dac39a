-- wrk script for the example service. PATHS=health: GET /health (touches no account: the HTTP floor).
-- Otherwise: POST a deposit of 1 per request, each under its own Idempotency-Key, to one of ACCOUNTS
-- accounts (default 1000; 1 is the "hot entity" case). At the end, one line `RESULT {...}` with the
-- requests per second, p50 and p99 in milliseconds, and the count of failed requests (non-2xx
-- answers and socket errors), which must be 0.
local health = os.getenv("PATHS") == "health"
local accounts = tonumber(os.getenv("ACCOUNTS") or "1000")
local counter = 0
local threads = {}

function setup(thread)
    thread:set("thread_id", #threads)
    table.insert(threads, thread)
end

function request()
    if health then
        return wrk.format("GET", "/health")
    end
    counter = counter + 1
    local account = (counter * 7919 + (thread_id or 0)) % accounts
    local key = string.format("bench-%d-%d", thread_id or 0, counter)
    return wrk.format("POST", "/accounts/a" .. account .. "/deposit",
        { ["Content-Type"] = "application/json", ["Idempotency-Key"] = key }, '{"amount":1}')
end

function done(summary, latency, requests)
    local seconds = summary.duration / 1e6
    local failed = summary.errors.status + summary.errors.connect + summary.errors.read
        + summary.errors.write + summary.errors.timeout
    io.write(string.format('RESULT {"per_sec":%.1f,"p50_ms":%.3f,"p99_ms":%.3f,"failed":%d}\n',
        summary.requests / seconds, latency:percentile(50) / 1000, latency:percentile(99) / 1000, failed))
end
