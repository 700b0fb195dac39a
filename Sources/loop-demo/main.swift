import EffectHandlers
import EventSources
import LoopCore
import LoopDemo
import LoopJournal
import LoopPersistence
import LoopRuntime

#if canImport(Glibc)
import Glibc
#endif

// A standard descriptor closed by the caller (`loop-demo --stdin <&-`) would be reused by the next
// descriptor opened (the dispatch library's, a job's pipe, the journal), and commands read from it or
// errors written into it. Put /dev/null there first, before anything else opens a descriptor.
for standard in Int32(0)...2 where fcntl(standard, F_GETFD) == -1 && errno == EBADF {
    _ = open("/dev/null", O_RDWR)
}

// Each job runs under a guard: this same executable, started as `loop-demo --job-guard PID /bin/sh -c
// COMMAND` (see JobGuard). It does nothing else.
let commandLine = CommandLine.arguments
if commandLine.count > 3, commandLine[1] == JobGuard.flag, let parent = Int32(commandLine[2]) {
    JobGuard.run(parent: parent, command: Array(commandLine.dropFirst(3)))
}

/// This executable's path, for the job guards: `/proc/self/exe` resolved now, so `ps` shows it.
let executable: String = {
    var path = [CChar](repeating: 0, count: 4_096)
    let length = readlink("/proc/self/exe", &path, path.count - 1)
    guard length > 0 else { return "/proc/self/exe" }
    return String(decoding: path.prefix(length).map { UInt8(bitPattern: $0) }, as: UTF8.self)
}()

// loop-demo: a job runner built from EffectLoop's modules. Every decision is the pure update in
// LoopDemo/JobRunner+Update.swift; this file only wires services, sources and the loop together.

let usage = """
    usage: loop-demo [--stdin] [--journal FILE | --store DIR [--accept-loss]]
           loop-demo replay FILE | replay --store DIR [--accept-loss] | verify --store DIR
           loop-demo --help | --version

    With no arguments, runs a built-in scenario of a dozen jobs and prints a summary.
      --stdin          read commands from standard input instead, one per line:
                         \(Command.usage.joined(separator: "\n                         "))
      --journal FILE   record every event to FILE (JSON Lines, with a state digest every 10 events)
      --acks           with --journal, print "journaled N" to standard error once event N is in the file
      --store DIR      a durable run: every event is on disk in DIR before its effects start; after a
                       crash (even kill -9), the same command with the same DIR continues the run:
                       finished jobs never run again, running ones start again (at least once)
      --accept-loss    with --store, open a store that lost acknowledged events (a log file deleted
                       or cut short) instead of refusing it; what is gone is printed first
      node --postgres CONNINFO [--name NAME] [--limit N]
                       run one node of the job runner as a cluster, until SIGTERM (it then hands its
                       jobs' shards over to the other nodes); at most N commands (default 3) run on
                       the node at once, whatever jobs they belong to; the others wait their turn
      submit --postgres CONNINFO [--key KEY] NAME [--timeout SECONDS] [--retries N] -- COMMAND...
                       submit a job to the cluster; exits 0 once it is committed. With --key, a
                       request: waits for the node's answer (queued NAME, or why it was rejected),
                       prints it and exits 0 if queued, 1 if rejected, 75 if no answer came (try the
                       same KEY again: it is not applied twice), 73 if the database is unreachable
      jobs --postgres CONNINFO
                       one line per job of the cluster: NAME OUTCOME
      cluster-demo     a throwaway PostgreSQL server, 3 nodes and a dozen jobs; one node is killed
                       with SIGKILL while jobs run, the others finish them (make demo-cluster)
      replay FILE      replay a journal through the pure logic, check its digests, print the final state
      replay --store DIR
                       replay a store's events through the pure logic, check them against its
                       snapshot, print the final state; it only reads the store (nothing is cut or
                       written, so it works on a store in use or on a read-only file system), and
                       skips an unfinished last write
      verify --store DIR
                       the check before a deploy: replay every stream of the store as replay --store
                       does, with this build's program (each record through the update of the program
                       revision that decided it) and print one line; exit 0 only if every record
                       replays and every snapshot matches, 65 naming, for each stream that does not,
                       its first record it cannot replay (or its snapshot's differences). It only reads
                       the store
    SIGINT, SIGTERM or SIGHUP shuts down gracefully: running jobs get 2 seconds, then are killed.
    A second one stops at once: running jobs are killed, and the summary is still printed.
    A failed job is retried with a backoff doubling from 100 ms, at most 60 s between attempts.
    Input errors go to standard error; control characters in names and output are shown escaped.
    Exit status:
      0   every job succeeded (or none was submitted)
      1   some job failed or was cancelled
      64  usage error
      65  a journal or store that does not replay (damaged, or records that no longer decode)
      66  replay --store, verify --store: no store in the directory
      70  an internal error
      73  the journal file or store cannot be created (or another process holds the store)
      74  the store failed while running (disk full, I/O error); what was recorded is kept

    """

func printError(_ text: String) {
    var text = text + "\n"
    text.withUTF8 { bytes in _ = write(2, bytes.baseAddress, bytes.count) }
}

enum Mode {
    case run(stdin: Bool, journal: String?, acks: Bool, store: String?, acceptLoss: Bool)
    case node(conninfo: String, name: String?, limit: Int)
    case submit(conninfo: String, words: [String], key: String?)
    case jobs(conninfo: String)
    case clusterDemo
    case replay(String)
    case replayStore(String, acceptLoss: Bool)
    case verifyStore(String)
    case help
    case version
}

func parseArguments(_ arguments: [String]) -> Result<Mode, CommandError> {
    if arguments == ["--help"] || arguments == ["-h"] { return .success(.help) }
    if arguments == ["--version"] { return .success(.version) }
    if let verb = arguments.first, ["node", "submit", "jobs"].contains(verb) {
        guard arguments.count >= 3, arguments[1] == "--postgres" else {
            return .failure(CommandError(description: "\(verb) needs --postgres CONNINFO"))
        }
        let conninfo = arguments[2]
        let rest = Array(arguments.dropFirst(3))
        switch verb {
        case "node":
            let usage = CommandError(description: "usage: node --postgres CONNINFO [--name NAME] [--limit N]")
            var (name, limit): (String?, Int) = (nil, 3)
            var options = rest[...]
            while let option = options.popFirst() {
                guard let value = options.popFirst() else { return .failure(usage) }
                switch option {
                case "--name" where name == nil:
                    name = value
                case "--limit":
                    guard let number = Int(value), number >= 1 else {
                        return .failure(
                            CommandError(description: "--limit needs a number of at least 1, not '\(value)'")
                        )
                    }
                    limit = number
                default:
                    return .failure(usage)
                }
            }
            return .success(.node(conninfo: conninfo, name: name, limit: limit))
        case "submit":
            // [--key KEY] NAME [--timeout SECONDS] [--retries N] -- COMMAND..., as `run` takes them.
            var words = rest
            var key: String?
            if words.first == "--key", words.count >= 2 {
                key = words[1]
                words.removeFirst(2)
            }
            guard let dash = words.firstIndex(of: "--"), dash >= 1, dash < words.count - 1 else {
                return .failure(
                    CommandError(
                        description:
                            "usage: submit --postgres CONNINFO [--key KEY] NAME [--timeout S] [--retries N] -- COMMAND..."
                    )
                )
            }
            return .success(.submit(conninfo: conninfo, words: words, key: key))
        default:
            guard rest.isEmpty else { return .failure(CommandError(description: "usage: jobs --postgres CONNINFO")) }
            return .success(.jobs(conninfo: conninfo))
        }
    }
    if arguments == ["cluster-demo"] { return .success(.clusterDemo) }
    if arguments.first == "verify" {
        guard arguments.count == 3, arguments[1] == "--store" else {
            return .failure(CommandError(description: "usage: verify --store DIR"))
        }
        return .success(.verifyStore(arguments[2]))
    }
    if arguments.first == "replay" {
        if arguments.count >= 3 && arguments.count <= 4 && arguments[1] == "--store"
            && (arguments.count == 3 || arguments[3] == "--accept-loss")
        {
            return .success(.replayStore(arguments[2], acceptLoss: arguments.count == 4))
        }
        guard arguments.count == 2 else { return .failure(CommandError(description: "replay takes one journal file")) }
        return .success(.replay(arguments[1]))
    }
    var stdin = false
    var acks = false
    var acceptLoss = false
    var journal: String?
    var store: String?
    var index = 0
    while index < arguments.count {
        switch arguments[index] {
        case "--stdin":
            stdin = true
        case "--acks":
            acks = true
        case "--accept-loss":
            acceptLoss = true
        case "--journal":
            guard index + 1 < arguments.count else {
                return .failure(CommandError(description: "--journal needs a file"))
            }
            journal = arguments[index + 1]
            index += 1
        case "--store":
            guard index + 1 < arguments.count else {
                return .failure(CommandError(description: "--store needs a directory"))
            }
            store = arguments[index + 1]
            index += 1
        default:
            return .failure(CommandError(description: "unknown argument '\(arguments[index].prefix(40))'"))
        }
        index += 1
    }
    guard !acks || journal != nil else { return .failure(CommandError(description: "--acks needs --journal")) }
    guard !acceptLoss || store != nil else {
        return .failure(CommandError(description: "--accept-loss needs --store"))
    }
    guard journal == nil || store == nil else {
        return .failure(CommandError(description: "--journal and --store cannot be used together"))
    }
    return .success(.run(stdin: stdin, journal: journal, acks: acks, store: store, acceptLoss: acceptLoss))
}

let program = JobRunner.program(limit: 3)
let durableProgram = JobRunner.durableProgram(limit: 3)

/// The demo's version, printed by `--version`.
let version = "0.4.0"

// A closed standard output is an error on the write that finds it (EPIPE), not the death of the
// process by SIGPIPE with its jobs left running.
signal(SIGPIPE, SIG_IGN)

// Processes a job leaves behind (`setsid cmd &`) are re-parented to the demo, not to PID 1, so the
// demo can find them and kill them when it stops.
ProcessTree.becomeSubreaper()

func replay(_ path: String) -> Int32 {
    do {
        let contents = try JournalReader.read(path, as: JobRunner.Event.self)
        for warning in contents.warnings { printError("warning: \(warning)") }
        let next = try program.update.replay(from: program.first, journal: contents.records)
        for line in JobRunner.summary(next.state) { print(line) }
        let digests = contents.records.count { $0.digest != nil }
        print("replayed \(contents.records.count) events; all \(digests) digests matched")
        return 0
    } catch {
        printError("loop-demo: \(error)")
        return 65
    }
}

/// Replays the store in `directory` from its first event, checks the fold against the latest snapshot,
/// and prints the final state (with `summary`; otherwise only the verdict: the deploy check). One page
/// of events in memory at a time.
func replayStore(_ directory: String, acceptLoss: Bool, summary: Bool = true) async -> Int32 {
    // Opening a store creates one where there is none: a replay must find one there instead.
    // A store is its log files, or its manifest (which names the log files even if they are gone).
    guard
        (FileSystem.entries(of: directory) ?? []).contains(where: { $0.hasPrefix("segment-") || $0 == "store.manifest" }
        )
    else {
        printError("loop-demo: no store in \(directory)")
        return 66
    }
    let store: FileEventStore
    switch openStore(directory, readOnly: true, acceptLoss: acceptLoss) {
    case .success(let opened): store = opened
    case .failure(let status): return status.code
    }
    do {
        guard summary else {
            // Every stream of the store, not only the demo's: a store is verified whole.
            let verification = await StoreReplay.verify(
                store: store,
                streams: try store.streamNames(),
                program: durableProgram,
                events: BinaryCodec<JobRunner.Event>(),
                states: BinaryCodec<JobRunner.State>()
            )
            await store.close()
            for failure in verification.failures { printError("loop-demo: \(failure)") }
            guard verification.failures.isEmpty else { return 65 }
            print(
                "verified \(verification.streams) stream\(verification.streams == 1 ? "" : "s") and "
                    + "\(verification.records) records in \(directory) with revision \(durableProgram.revision) of the program"
            )
            return 0
        }
        let replay = try await StoreReplay.run(store: store, stream: JobRunner.stream, program: durableProgram)
        for line in JobRunner.summary(replay.state) { print(Console.escapingControlCharacters(line)) }
        print("replayed \(replay.events) events from \(directory)" + replay.snapshotCheck)
        await store.close()
        return 0
    } catch {
        printError("loop-demo: \(error)")
        await store.close()
        return 65
    }
}

func run(stdin: Bool, journalPath: String?, acks: Bool, storePath: String?, acceptLoss: Bool) async -> Int32 {
    let console = Console.standardOutput()
    // What the `metrics` command prints: counts and update latencies per event and effect case.
    let metrics = MetricsObserver<JobRunner.Event, JobRunner.Effect>()
    let router = JobRunner.router(
        shell: SystemShell(guardExecutable: executable),
        console: console,
        metrics: { metrics.render() }
    )
    let input: any EventSource<JobRunner.Event> =
        stdin
        ? LineSource(
            fileDescriptor: 0,
            end: .inputEnded,
            invalid: { .invalidInput($0.description) },
            event: { Command.event(for: $0) }
        )
        : Scenario(marker: "/tmp/loop-demo-flaky-\(getpid())", clock: ContinuousClock())
    let sources: [any EventSource<JobRunner.Event>] = [
        input,
        TimerSource(every: .seconds(1), clock: ContinuousClock(), event: .tick),
    ]
    var recorder: JournalRecorder<JobRunner.State, JobRunner.Event, JobRunner.Effect>?
    if let journalPath {
        do {
            let journal = try JSONLinesJournal<JobRunner.Event>(path: journalPath)
            let onFailure: @Sendable (any Error) -> Void = { error in printError("loop-demo: journal: \(error)") }
            let acknowledge: @Sendable (Int) -> Void = { sequence in printError("journaled \(sequence)") }
            recorder = JournalRecorder(
                journal: journal,
                digestEvery: 10,
                onFailure: onFailure,
                onRecorded: acks ? acknowledge : nil
            )
        } catch {
            printError("loop-demo: \(error)")
            return 73
        }
    }
    if let storePath {
        return await runDurably(
            storePath,
            acceptLoss: acceptLoss,
            router: router,
            sources: sources,
            console: console,
            metrics: metrics
        )
    }
    let loop = Loop(
        program: program,
        effects: router,
        sources: sources,
        observer: Observers(metrics: metrics, recorder: recorder)
    )
    let signals = ShutdownSignals(
        graceful: { loop.send(.shutdown) },
        immediate: { loop.stop(gracePeriod: .zero) }
    )
    defer { _ = signals }
    // No job's process outlives the demo, whatever the way out: kill what the jobs left behind
    // (re-parented here).
    defer { ProcessTree.killTree(of: getpid()) }
    do {
        let report = try await loop.run()
        printSummary(loop.state, report: report, console: console)
        if let recorder { print("journal: \(recorder.recorded) events recorded in \(journalPath ?? "")") }
        return loop.state.allSucceeded ? 0 : 1
    } catch {
        printError("loop-demo: \(error)")
        return 70
    }
}

/// Kills what the jobs left behind, then prints the summary table and the loop's report.
func printSummary(_ state: JobRunner.State, report: LoopReport, console: Console) {
    ProcessTree.killTree(of: getpid())
    console.clearProgress()
    print("")
    for line in JobRunner.summary(state) { print(Console.escapingControlCharacters(line)) }
    print("loop: \(report)")
}

/// Opens the store in `directory`, or says why not and gives the exit status: 65 for a damaged store
/// (or one that lost acknowledged events, unless `acceptLoss`), 73 for one that cannot be opened
/// (another process holds it, or an I/O error).
func openStore(_ directory: String, readOnly: Bool = false, acceptLoss: Bool) -> Result<FileEventStore, ExitStatus> {
    do {
        let store = try FileEventStore(
            directory: directory,
            // `replay` is the checking tool: it reads every record of the log, not the index checkpoint.
            options: FileEventStore.Options(readOnly: readOnly, acceptLoss: acceptLoss, indexCheckpoint: !readOnly)
        )
        if case .refused(let reason) = store.opening.checkpoint {
            printError("loop-demo: read the whole log: its index checkpoint does not fit it (\(reason))")
        }
        if let lost = store.opening.lost { printError("loop-demo: opened the store accepting a loss: \(lost)") }
        if let tail = store.opening.truncated {
            if readOnly {
                printError(
                    "loop-demo: skipped \(tail.bytes) bytes of an unfinished write at offset \(tail.offset) of \(tail.file)"
                )
            } else {
                printError("loop-demo: repaired the store: \(tail)")
            }
        }
        return .success(store)
    } catch {
        printError("loop-demo: \(error)")
        return .failure(ExitStatus(code: error.isDamage ? 65 : 73))
    }
}

/// The demo's observers: the metrics, and the journal when there is one (which reads the state).
struct Observers: LoopStateObserver {
    let metrics: MetricsObserver<JobRunner.Event, JobRunner.Effect>
    let recorder: JournalRecorder<JobRunner.State, JobRunner.Event, JobRunner.Effect>?

    func observe(_ activity: LoopActivity<JobRunner.Event, JobRunner.Effect>) {
        metrics.observe(activity)
        recorder?.observe(activity)
    }

    func observe(_ activity: LoopActivity<JobRunner.Event, JobRunner.Effect>, state: () -> JobRunner.State) {
        metrics.observe(activity)
        recorder?.observe(activity, state: state)
    }
}

/// An exit status, as an error value.
struct ExitStatus: Error {
    let code: Int32
}

/// The job runner as a durable loop over a file store in `directory`.
func runDurably(
    _ directory: String,
    acceptLoss: Bool,
    router: EffectRouter<JobRunner.Effect, JobRunner.Event>,
    sources: [any EventSource<JobRunner.Event>],
    console: Console,
    metrics: MetricsObserver<JobRunner.Event, JobRunner.Effect>
) async -> Int32 {
    let store: FileEventStore
    switch openStore(directory, acceptLoss: acceptLoss) {
    case .success(let opened): store = opened
    case .failure(let status): return status.code
    }
    let loop = DurableLoop(
        stream: JobRunner.stream,
        program: durableProgram,
        effects: router,
        store: store,
        snapshotEvery: 100,
        sources: sources,
        observer: metrics
    )
    let signals = ShutdownSignals(
        graceful: { loop.send(.shutdown) },
        immediate: { loop.stop(gracePeriod: .zero) }
    )
    defer { _ = signals }
    defer { ProcessTree.killTree(of: getpid()) }
    let status: Int32
    do {
        let report = try await loop.run()
        printSummary(loop.state, report: report, console: console)
        print("store: \(loop.version) events in \(directory)")
        status = loop.state.allSucceeded ? 0 : 1
    } catch {
        ProcessTree.killTree(of: getpid())
        printError("loop-demo: \(error)")
        // What the run saw, and how much of it the store kept: a restart with the same directory
        // continues from there.
        console.clearProgress()
        for line in JobRunner.summary(loop.state) { print(Console.escapingControlCharacters(line)) }
        print(
            "store: \(loop.version) events kept in \(directory); the table is what the run saw, which may be "
                + "ahead of the store (a restart continues from what it kept)"
        )
        // Records that no longer decode are a data error, as a damaged store is; anything else the
        // store did is an I/O error.
        if case .storeFailed(let failure) = error as? DurableLoopError {
            status = failure.isUndecodable || failure.isCorruption ? 65 : 74
        } else {
            status = error is DurableLoopError ? 74 : 70
        }
    }
    await store.close()
    return status
}

switch parseArguments(Array(CommandLine.arguments.dropFirst())) {
case .success(.help):
    print(usage, terminator: "")
    exit(0)
case .success(.version):
    print("loop-demo \(version) (EffectLoop)")
    exit(0)
case .success(.replay(let path)):
    exit(replay(path))
case .success(.replayStore(let directory, let acceptLoss)):
    exit(await replayStore(directory, acceptLoss: acceptLoss))
case .success(.verifyStore(let directory)):
    exit(await replayStore(directory, acceptLoss: false, summary: false))
case .success(.run(let stdin, let journal, let acks, let store, let acceptLoss)):
    exit(await run(stdin: stdin, journalPath: journal, acks: acks, storePath: store, acceptLoss: acceptLoss))
case .success(.node(let conninfo, let name, let limit)):
    exit(await runNode(conninfo: conninfo, name: name, limit: limit))
case .success(.submit(let conninfo, let words, let key)):
    exit(await submit(conninfo: conninfo, words: words, key: key))
case .success(.jobs(let conninfo)):
    exit(await listJobs(conninfo: conninfo))
case .success(.clusterDemo):
    exit(await clusterDemo())
case .failure(let error):
    printError("loop-demo: \(error)")
    printError(usage)
    exit(64)
}
