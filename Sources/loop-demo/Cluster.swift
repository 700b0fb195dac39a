import EffectHandlers
import EventSources
import Foundation
import LoopCore
import LoopDemo
import LoopPersistence
import LoopPostgres
import LoopRuntime
import LoopSupport

// The job runner as a cluster: every job is an entity (its stream `job-NAME`) running today's pure
// update, owned by whichever node owns its shard. PostgreSQL is the only channel between the nodes.

/// The stream of job `name`.
func jobStream(_ name: String) -> String { "job-\(name)" }

/// How the cluster encodes the runner's events (JSON, so `psql` can read them) and states.
let clusterEvents = JSONCodec<JobRunner.Event>()
let clusterStates = JSONCodec<JobRunner.State>()

/// `loop-demo node --postgres CONNINFO [--name NAME] [--limit N]`: one node, until SIGTERM or SIGINT,
/// when it hands its shards over and exits 0; 1 if a failure stopped it. Each job is an entity of its
/// own, so the runner's limit (per entity) does not bound the node: its shell runs at most `limit`
/// commands at once.
func runNode(conninfo: String, name: String?, limit: Int) async -> Int32 {
    let name = name ?? "node-\(ProcessInfo.processInfo.hostName)-\(getpid())"
    let console = Console.standardOutput()
    do {
        let node = try await ClusterNode(
            connecting: conninfo,
            name: name,
            program: durableProgram,
            effects: JobRunner.router(
                shell: BoundedShell(SystemShell(guardExecutable: executable), limit: limit),
                console: console
            ),
            events: clusterEvents,
            states: clusterStates
        )
        // The watcher releases its handler, and the node with it, when cancelled: a node kept alive until
        // the process exits is what LeakSanitizer reports as a leak of its session's weak-reference table.
        let signals = SignalWatcher([.terminate, .interrupt]) { _ in node.stop() }
        defer { signals.cancel() }
        console.line("\(name): joined the cluster")
        // A lost session (a database restart, a lease lost while paused) is ridden out: said, and the
        // node joins again.
        try await node.run(onFailure: { printError("loop-demo: \(name): \($0); going on") })
        console.line("\(name): left the cluster (\(node.counts.dispatched) events taken)")
        return 0
    } catch {
        printError("loop-demo: \(name): \(error)")
        return 1
    }
}

/// `loop-demo submit --postgres CONNINFO [--key KEY] NAME -- COMMAND...`: puts the job in the inbox;
/// exits 0 once that is committed. With a key, asks the job's entity through a ``ClusterClient`` and
/// prints its answer (see the usage).
func submit(conninfo: String, words: [String], key: String?) async -> Int32 {
    let line = "run " + words.joined(separator: " ")
    let event: JobRunner.Event
    switch Command.parse(line) {
    case .success(let parsed): event = parsed
    case .failure(let error):
        printError("loop-demo: \(error)")
        return 64
    }
    guard case .submit(let spec) = event else {
        printError("loop-demo: submit takes NAME -- COMMAND...")
        return 64
    }
    if let key { return await ask(conninfo: conninfo, spec: spec, key: key) }
    do {
        let inbox = try await PostgresInbox(connecting: conninfo)
        try await inbox.send(try clusterEvents.encode(event), to: jobStream(spec.name))
        await inbox.close()
        print("submitted \(spec.name)")
        return 0
    } catch {
        printError("loop-demo: \(error)")
        return 73
    }
}

/// `submit --key`: the job as a request under `key`; prints the answer.
func ask(conninfo: String, spec: JobRunner.Spec, key: String) async -> Int32 {
    let client: ClusterClient<JobRunner.Event>
    do {
        client = try await ClusterClient(connecting: conninfo, events: clusterEvents)
    } catch {
        printError("loop-demo: \(error)")
        return 73
    }
    do throws(RequestError) {
        let answer: String = try await client.request(to: jobStream(spec.name), key: key, timeout: .seconds(30)) {
            .request(spec, replyTo: $0)
        }
        await client.close()
        print(Console.escapingControlCharacters(answer))
        return answer.hasPrefix("queued") ? 0 : 1
    } catch {
        await client.close()
        printError("loop-demo: no answer for key \(key): \(error)")
        return 75
    }
}

/// The state of every job in the cluster's store, each replayed from its stream through the pure
/// update (the same fold a node's recovery does).
func clusterJobs(conninfo: String) async throws -> [JobRunner.Job] {
    let store = try await PostgresEventStore(connecting: conninfo)
    defer { Task { await store.close() } }
    let codec = InboxedCodec(clusterEvents)
    var jobs: [JobRunner.Job] = []
    var after = ""
    while true {
        let page = try await store.streams(after: after, limit: 500)
        for stream in page where stream.hasPrefix("job-") {
            var state = durableProgram.initial
            for try await stored in store.events(of: stream) {
                // What the node keeps beside an event (its timers) is not the program's; a record of
                // timers alone holds no event.
                guard let event = try storedEvent(stored.payload) else { continue }
                _ = durableProgram.update(&state, try codec.decode(event).event)
            }
            jobs += state.ordered
        }
        guard let last = page.last else { break }
        after = last
    }
    await store.close()
    return jobs
}

/// `loop-demo jobs --postgres CONNINFO`: one line per job, `NAME OUTCOME`.
func listJobs(conninfo: String) async -> Int32 {
    do {
        for job in try await clusterJobs(conninfo: conninfo) {
            print(Console.escapingControlCharacters("\(job.spec.name) \(JobRunner.describe(job))"))
        }
        return 0
    } catch {
        printError("loop-demo: \(error)")
        return 73
    }
}

/// `loop-demo cluster-demo`: a throwaway PostgreSQL server, three nodes, a dozen jobs; one node is killed
/// with SIGKILL while jobs run, the others finish them; then the summary.
func clusterDemo() async -> Int32 {
    let server: TemporaryPostgres
    do {
        server = try await TemporaryPostgres(durable: false)
    } catch {
        printError("loop-demo: \(error)")
        return 73
    }
    defer { server.stop() }
    let conninfo = server.conninfo + " dbname=postgres"
    do {
        // The schema, before the nodes race to install it.
        await (try PostgresInbox(connecting: conninfo)).close()
        print("cluster-demo: a throwaway PostgreSQL server in \(server.directory ?? "?")")
        var nodes = try (1...3).map {
            try DemoProcess([executable, "node", "--postgres", conninfo, "--name", "node-\($0)"])
        }
        defer { for node in nodes { node.stop(SIGKILL) } }
        let jobs = [
            ("compile", "sleep 1"), ("test", "sleep 2"), ("lint", "true"), ("docs", "sleep 1"),
            ("package", "sleep 2"), ("release", "true"), ("backup", "sleep 2"), ("index", "sleep 1"),
            ("thumbnails", "sleep 2"), ("report", "true"), ("cleanup", "true"), ("notify", "sleep 1"),
        ]
        for (name, command) in jobs {
            guard await submit(conninfo: conninfo, words: [name, "--", command], key: nil) == 0 else { return 73 }
        }
        // Once jobs run, the first node dies: no goodbye, its locks go with its connection.
        for _ in 0..<200 {
            if try await clusterJobs(conninfo: conninfo).contains(where: { $0.status.isRunning }) { break }
            try await Task.sleep(for: .milliseconds(50))
        }
        print("cluster-demo: kill -9 node-1 (pid \(nodes[0].pid)) while jobs run")
        nodes[0].stop(SIGKILL)
        var finished: [JobRunner.Job] = []
        for _ in 0..<1_200 {
            finished = try await clusterJobs(conninfo: conninfo)
            if finished.count == jobs.count && finished.allSatisfy({ $0.status.isFinal }) { break }
            try await Task.sleep(for: .milliseconds(100))
        }
        for node in nodes.dropFirst() { node.stop(SIGTERM) }
        nodes = []
        print("")
        print("job          outcome")
        for job in finished {
            print(job.spec.name.padding(toLength: 12, withPad: " ", startingAt: 0) + " " + JobRunner.describe(job))
        }
        let succeeded = finished.count { if case .succeeded = $0.status { true } else { false } }
        print("\(succeeded) of \(jobs.count) jobs succeeded; node-1 was killed, node-2 and node-3 finished its jobs")
        return succeeded == jobs.count ? 0 : 1
    } catch {
        printError("loop-demo: \(error)")
        return 70
    }
}

/// A child process of the cluster demo; its output goes to this process's.
final class DemoProcess {
    let pid: pid_t
    private var reaped = false

    init(_ words: [String]) throws {
        var failure: Int32 = 0
        guard
            let pid = ChildProcess.spawn(
                words[0],
                words,
                output: .inherited,
                options: ChildProcess.Options(endsWithThisProcess: true),
                failure: &failure
            )
        else {
            throw CommandError(description: "cannot start \(words[0]) (errno \(failure))")
        }
        self.pid = pid
    }

    /// Sends `signal` and waits for the process to end.
    func stop(_ signal: Int32) {
        guard !reaped else { return }
        ChildProcess.stop(pid, with: signal)
        reaped = true
    }
}
