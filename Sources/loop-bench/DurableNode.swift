import EffectHandlers
import EventSources
import LoopCore
import LoopPersistence
import LoopRuntime
import LoopSupport
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// `loop-bench durable-node DIR`: a process serving `KeyedLedger` entities from the file store in DIR,
/// for the fault test that kills it. Each line on standard input, `KEY ENTITY AMOUNT`, is a keyed
/// request; its answer is printed as `KEY ANSWER` (or `KEY error WHY`) once its event is on disk. At the
/// end of its input it stops gracefully and exits 0.
func runDurableNode(_ words: [String]) async -> Int32 {
    guard words.count == 2 else {
        Measure.printError("usage: loop-bench durable-node DIRECTORY\n")
        return 64
    }
    let store: FileEventStore
    do {
        store = try FileEventStore(directory: words[1])
    } catch {
        Measure.printError("durable-node: \(error)\n")
        return 74
    }
    let group = DurableLoopGroup<Int, KeyedLedger.State, KeyedLedger.Event, KeyedLedger.Effect>(
        program: KeyedLedger.program,
        effects: EffectRouter(),
        store: store,
        // Snapshots (carrying the callers' keys) every few events, so recovery after a kill reads them.
        snapshotEvery: 3
    )
    let running = Task { try await group.run() }
    let inFlight = Locked(0)
    let ended = OneShot()
    let reader = OSThread {
        var pending: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 4_096)
        while true {
            let count = buffer.withUnsafeMutableBytes { read(0, $0.baseAddress, $0.count) }
            if count < 0 && errno == EINTR { continue }
            guard count > 0 else { break }
            pending += buffer[..<count]
            while let newline = pending.firstIndex(of: 10) {
                let line = String(decoding: pending[..<newline], as: UTF8.self)
                pending.removeFirst(newline + 1)
                let fields = line.split(separator: " ")
                guard fields.count == 3, let entity = Int(fields[1]), let amount = Int(fields[2]) else {
                    Measure.printError("durable-node: a line that is not KEY ENTITY AMOUNT: \(line)\n")
                    continue
                }
                let key = String(fields[0])
                inFlight.withLock { $0 += 1 }
                Task {
                    defer { inFlight.withLock { $0 -= 1 } }
                    do {
                        let answer = try await group.request(to: entity, key: key, timeout: .seconds(60)) {
                            .apply(key: key, amount: amount, replyTo: $0)
                        }
                        writeLine("\(key) \(answer)")
                    } catch {
                        writeLine("\(key) error \(error)")
                    }
                }
            }
        }
        ended.fire()
    }
    reader.detach()
    await ended.wait()
    while inFlight.withLock({ $0 }) > 0 { try? await Task.sleep(for: .milliseconds(5)) }
    group.stop()
    _ = try? await running.value
    await store.close()
    return 0
}

/// Writes `line` and a newline to standard output in one call (atomic on a pipe: under 4,096 bytes),
/// unbuffered: a node's report to the test that reads it, whole even if the node is killed right after.
func writeLine(_ line: String) {
    var text = line + "\n"
    text.withUTF8 { bytes in _ = write(1, bytes.baseAddress, bytes.count) }
}

/// A signal fired once, awaited once.
private final class OneShot: Sendable {
    private let state = Mutex<(fired: Bool, waiter: CheckedContinuation<Void, Never>?)>((false, nil))

    func fire() {
        let waiter = state.withLock { state in
            state.fired = true
            defer { state.waiter = nil }
            return state.waiter
        }
        waiter?.resume()
    }

    func wait() async {
        await withCheckedContinuation { continuation in
            let fired = state.withLock { state in
                if !state.fired { state.waiter = continuation }
                return state.fired
            }
            if fired { continuation.resume() }
        }
    }
}
