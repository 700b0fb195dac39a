import EventSources
import LoopPersistence
import LoopRuntime
import LoopSupport
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// A `loop-bench durable-node` process on a file store, talked to over a socket: requests go in as
/// lines, answers come out as lines. Killed with SIGKILL if still running when the test lets it go.
final class DurableNode: Sendable {
    let pid: Int32
    /// This process's end of the socket: requests are written to it, answers read from it.
    let socket: Int32
    private let reader: OSThread
    /// Whether the process was waited for: its pid may then belong to another, and is never signalled.
    private let reaped = Locked(false)

    static var binary: String {
        let test = CommandLine.arguments[0]
        return String(test[..<(test.lastIndex(of: "/") ?? test.startIndex)]) + "/loop-bench"
    }

    /// Starts a node on `directory`; each answer line goes to `answer`, and `ended` is called once the
    /// node's output ends (it exited or was killed).
    init(
        directory: String,
        answer: @escaping @Sendable (_ key: String, _ line: Substring) -> Void,
        ended: @escaping @Sendable () -> Void
    ) throws {
        var ends: [Int32] = [0, 0]
        // Close-on-exec: no other child of this process (another test's) may hold the node's socket.
        guard socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0, &ends) == 0 else {
            throw Failure("socketpair")
        }
        var failure: Int32 = 0
        let pid = ChildProcess.spawn(
            Self.binary,
            [Self.binary, "durable-node", directory],
            input: ends[1],
            output: .descriptor(ends[1]),
            options: ChildProcess.Options(endsWithThisProcess: true),
            failure: &failure
        )
        close(ends[1])
        guard let pid else {
            close(ends[0])
            throw Failure("cannot start \(Self.binary): errno \(failure)")
        }
        self.pid = pid
        socket = ends[0]
        let socket = ends[0]
        reader = OSThread {
            var pending: [UInt8] = []
            var buffer = [UInt8](repeating: 0, count: 4_096)
            while true {
                let count = buffer.withUnsafeMutableBytes { read(socket, $0.baseAddress, $0.count) }
                if count < 0 && errno == EINTR { continue }
                guard count > 0 else { break }
                pending += buffer[..<count]
                while let newline = pending.firstIndex(of: 10) {
                    let line = String(decoding: pending[..<newline], as: UTF8.self)
                    pending.removeFirst(newline + 1)
                    let key = line.prefix { $0 != " " }
                    answer(String(key), line.dropFirst(key.count + 1))
                }
            }
            ended()
        }
    }

    /// Sends one request line; `false` if the node is gone.
    func send(_ line: String) -> Bool {
        var text = line + "\n"
        return text.withUTF8 { bytes in
            Glibc.send(socket, bytes.baseAddress, bytes.count, Int32(MSG_NOSIGNAL)) == bytes.count
        }
    }

    /// Kills the node with SIGKILL and waits until it and its output have ended.
    func kill() {
        stop()
        reader.join()
    }

    /// Kills the node with SIGKILL and waits for it, if it is still this process's unreaped child. Once it
    /// has been waited for, its pid may belong to another process: it is never signalled again.
    private func stop() {
        reaped.withLock { reaped in
            guard !reaped else { return }
            reaped = true
            var status: Int32 = 0
            // 0: still running, and ours (an unreaped child's pid is never reused), so it is safe to signal.
            guard waitpid(pid, &status, WNOHANG) == 0 else { return }
            ChildProcess.stop(pid, with: SIGKILL)
        }
    }

    /// Ends the node's input: it finishes what it has, stops gracefully and exits. Its exit status, or
    /// `nil` if this process could not wait for it (nothing else in it reaps another's children).
    func finish() -> Int32? {
        shutdown(socket, Int32(SHUT_WR))
        var status: Int32 = 0
        var waited = true
        while waitpid(pid, &status, 0) < 0 {
            if errno != EINTR {
                waited = false
                break
            }
        }
        reaped.withLock { $0 = true }
        reader.join()
        return waited ? status : nil
    }

    deinit {
        // Killed and its output read to the end, unless kill() or finish() did that already.
        if !reaped.withLock({ $0 }) {
            stop()
            reader.join()
        }
        close(socket)
    }

    struct Failure: Error, CustomStringConvertible {
        var description: String
        init(_ description: String) { self.description = description }
    }
}

@Suite(.serialized) struct DurableFaultTests {
    /// The answers requesters are waiting for, by key; and the answers they got.
    final class Requests: Sendable {
        let waiting = Locked<[String: CheckedContinuation<Int?, Never>]>([:])
        let answers = Locked<[String: Int]>([:])
        let problems = Locked<[String]>([])

        func answer(_ key: String, _ text: Substring) {
            guard let value = Int(text) else {
                problems.withLock { $0.append("\(key) \(text)") }
                return
            }
            waiting.withLock { $0.removeValue(forKey: key) }?.resume(returning: value)
        }

        /// The node died: every waiting requester will ask again.
        func fail() {
            let waiting = self.waiting.withLock { waiting in
                defer { waiting = [:] }
                return Array(waiting.values)
            }
            for continuation in waiting { continuation.resume(returning: nil) }
        }
    }

    /// The node of the moment, and how many there were.
    final class Nodes: Sendable {
        let current = Locked<(node: DurableNode?, generation: Int)>((nil, 0))
    }

    /// 8 requesters send keyed requests to 200 entities; the node is killed with SIGKILL at 20 seeded
    /// points and restarted; each requester asks again for what it had no answer to (and for its last
    /// answer, which must not change). In the end every key was applied exactly once, every answer is
    /// the one recorded, and every entity's state is the pure replay of what was applied to it.
    @Test(.timeLimit(.minutes(10)))
    func keyedRequestsSurviveKillsExactlyOnce() async throws {
        let (requesters, perRequester, entities, kills) = (8, 250, 200, 20)
        let directory = "/tmp/effectloop-fault-\(getpid())"
        removeTree(directory)
        defer { removeTree(directory) }
        var generator = SplitMix(state: 0x5EED_0022)
        let killPoints = (0..<kills).map { _ in Int.random(in: 20..<(requesters * perRequester - 20), using: &generator)
        }
        .sorted()
        let requests = Requests()
        let nodes = Nodes()
        let repeats = Locked<[String: [Int]]>([:])
        let retried = Locked(0)
        func start() throws {
            let node = try DurableNode(directory: directory, answer: requests.answer, ended: requests.fail)
            nodes.current.withLock { $0 = (node, $0.generation + 1) }
        }
        try start()
        defer { nodes.current.withLock { $0.node?.kill() } }

        /// Asks until answered: on the node of the moment, again on the next one if it dies first.
        @Sendable func ask(_ key: String, entity: Int, amount: Int) async -> Int {
            while true {
                let (node, generation) = nodes.current.withLock { ($0.node, $0.generation) }
                let answer = await withCheckedContinuation { (continuation: CheckedContinuation<Int?, Never>) in
                    requests.waiting.withLock { $0[key] = continuation }
                    if node?.send("\(key) \(entity) \(amount)") != true {
                        requests.waiting.withLock { $0.removeValue(forKey: key) }?.resume(returning: nil)
                    }
                }
                if let answer { return answer }
                retried.withLock { $0 += 1 }
                // Waits for the restart (a condition, polled), then asks again.
                while nodes.current.withLock({ $0.generation }) == generation {
                    try? await Task.sleep(for: .milliseconds(2))
                }
            }
        }

        let asking = Task {
            await withTaskGroup(of: Void.self) { group in
                for requester in 0..<requesters {
                    group.addTask {
                        var last: (key: String, entity: Int, amount: Int, answer: Int)?
                        var seen = nodes.current.withLock { $0.generation }
                        for index in 0..<perRequester {
                            // After a restart, the last answer is asked for again: it must not change.
                            let generation = nodes.current.withLock { $0.generation }
                            if generation != seen, let last {
                                let again = await ask(last.key, entity: last.entity, amount: last.amount)
                                repeats.withLock { $0[last.key, default: [last.answer]].append(again) }
                            }
                            seen = generation
                            let request = KeyedLedger.request(index, requester: requester, entities: entities)
                            let answer = await ask(request.key, entity: request.entity, amount: request.amount)
                            requests.answers.withLock { $0[request.key] = answer }
                            last = (request.key, request.entity, request.amount, answer)
                        }
                    }
                }
            }
        }
        for point in killPoints {
            while requests.answers.withLock({ $0.count }) < point { try await Task.sleep(for: .milliseconds(1)) }
            let node = nodes.current.withLock { $0.node }
            node?.kill()
            try start()
        }
        await asking.value
        let finished = nodes.current.withLock { current in
            defer { current.node = nil }
            return current.node
        }
        // Waited for off the concurrency pool: the node may take a while to finish under a sanitizer.
        let status = await offThePool { finished?.finish() ?? nil }
        #expect(status == 0, "the last node's exit status")
        #expect(requests.problems.withLock { $0 }.isEmpty)

        // Every first answer equals every repeat of it.
        for (key, answers) in repeats.withLock({ $0 }) {
            #expect(Set(answers).count == 1, "key \(key) was answered \(answers)")
        }
        #expect(repeats.withLock { $0.count } > 0, "no key was asked again after a restart")
        // The kills came while requests were on their way: some were asked again, unanswered.
        #expect(retried.withLock { $0 } > 0, "no request was cut off by a kill")
        #expect(nodes.current.withLock { $0.generation } == kills + 1)

        // Every key applied exactly once, answered as recorded, and each state the pure replay.
        let answers = requests.answers.withLock { $0 }
        #expect(answers.count == requesters * perRequester)
        let store = try FileEventStore(directory: directory)
        var applied: [String: Int] = [:]
        for entity in 0..<entities {
            let replay = try await StoreReplay.run(store: store, stream: "\(entity)", program: KeyedLedger.program)
            var balance = 0
            for entry in replay.state.applied {
                #expect(applied.updateValue(entry.answer, forKey: entry.key) == nil, "key \(entry.key) applied twice")
                let answer = balance + entry.amount < 0 ? -1 : balance + entry.amount
                if answer >= 0 { balance = answer }
                #expect(entry.answer == answer)
            }
            #expect(replay.state.balance == balance)
        }
        await store.close()
        #expect(applied == answers)
    }
}
