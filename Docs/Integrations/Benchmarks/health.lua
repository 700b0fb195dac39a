-- wrk script: GET /health (touches no account: the HTTP floor). Prints what deposit.lua prints.
wrk.path = "/health"
function done(summary, latency, requests)
    local seconds = summary.duration / 1e6
    local failed = summary.errors.status + summary.errors.connect + summary.errors.read
        + summary.errors.write + summary.errors.timeout
    io.write(string.format('RESULT {"per_sec":%.1f,"p50_ms":%.3f,"p99_ms":%.3f,"failed":%d}\n',
        summary.requests / seconds, latency:percentile(50) / 1000, latency:percentile(99) / 1000, failed))
end
