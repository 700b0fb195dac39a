import EventSources
import LoopRuntime
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// `SignalWatcher`, the one way the library, the demo and the benchmark watch signals. The signals here
/// are SIGWINCH and SIGURG, whose default action is to do nothing: a delivery that finds no watcher
/// cannot end the test process, and no other test watches them.
@Suite(.serialized) struct SignalWatcherTests {
    /// What the handlers saw.
    final class Seen: Sendable {
        let signals = Locked<[ProcessSignal]>([])
        var count: Int { signals.withLock { $0.count } }
    }

    /// Something a handler holds, to see when it is released.
    final class Held: Sendable {}

    static let windowChange = ProcessSignal(rawValue: SIGWINCH)
    static let urgent = ProcessSignal(rawValue: SIGURG)

    /// Delivers `signal` to this process until `seen` holds a delivery of it. Several may be sent before
    /// one is handled, and handled later: the tests compare counts taken once a watcher is cancelled.
    static func deliver(_ signal: ProcessSignal, until seen: Seen) async {
        await waitUntil("a \(signal) delivery to be handled") {
            kill(getpid(), signal.rawValue)
            return seen.signals.withLock { $0.contains(signal) }
        }
    }

    @Test func eachDeliveryReachesTheHandlerUntilCancelled() async throws {
        let seen = Seen()
        let watcher = SignalWatcher([Self.windowChange, Self.urgent]) { signal in
            seen.signals.withLock { $0.append(signal) }
        }
        await Self.deliver(Self.windowChange, until: seen)
        await Self.deliver(Self.urgent, until: seen)
        #expect(seen.signals.withLock { Set($0) } == [Self.windowChange, Self.urgent])
        watcher.cancel()
        let count = seen.count
        // A second watcher of the same signal hears it: the first one, cancelled, does not.
        let later = Seen()
        let second = SignalWatcher([Self.windowChange]) { signal in later.signals.withLock { $0.append(signal) } }
        await Self.deliver(Self.windowChange, until: later)
        #expect(seen.count == count)
        second.cancel()
    }

    @Test func cancelReleasesTheHandlerAndWhatItHolds() {
        weak var released: Held?
        let watcher: SignalWatcher
        do {
            let held = Held()
            released = held
            watcher = SignalWatcher([Self.urgent]) { _ in _ = held }
        }
        #expect(released != nil)
        watcher.cancel()
        #expect(released == nil)
        // A second cancel does nothing.
        watcher.cancel()
    }

    @Test func aHandlerMayCancelItsOwnWatcher() async throws {
        let seen = Seen()
        let cell = Locked<SignalWatcher?>(nil)
        /// How many deliveries the handler had seen when it cancelled its watcher, once it has.
        let cancelledAt = Locked<Int?>(nil)
        let watcher = SignalWatcher([Self.windowChange]) { signal in
            let count = seen.signals.withLock {
                $0.append(signal)
                return $0.count
            }
            if let watcher = cell.withLock({ $0 }) {
                watcher.cancel()
                cancelledAt.withLock { $0 = $0 ?? count }
            }
        }
        cell.withLock { $0 = watcher }
        await waitUntil("the handler to cancel its watcher") {
            kill(getpid(), SIGWINCH)
            return cancelledAt.withLock { $0 } != nil
        }
        // It cancelled itself without waiting for itself: later deliveries reach no handler.
        let later = Seen()
        let second = SignalWatcher([Self.windowChange]) { signal in later.signals.withLock { $0.append(signal) } }
        await Self.deliver(Self.windowChange, until: later)
        #expect(seen.count == cancelledAt.withLock { $0 })
        second.cancel()
        cell.withLock { $0 = nil }
    }

    /// A delivery that arrives while the handler is busy is not lost: the handler is called again once
    /// it is free. (Several such deliveries may share that call: libdispatch merges them.)
    @Test func aDeliveryWhileTheHandlerIsBusyIsNotLost() async throws {
        let seen = Seen()
        let gate = Locked(false)
        let watcher = SignalWatcher([Self.urgent]) { signal in
            seen.signals.withLock { $0.append(signal) }
            // The first call holds the queue until the test opens the gate.
            while !gate.withLock({ $0 }) { usleep(1_000) }
        }
        await Self.deliver(Self.urgent, until: seen)
        // The handler is busy with the first delivery: send one more, and wait until the kernel has
        // handed it over (it is no longer pending), so it arrived while the handler was busy.
        kill(getpid(), SIGURG)
        await waitUntil("the delivery to leave the pending set") { !Self.isPending(SIGURG) }
        gate.withLock { $0 = true }
        await waitUntil("the delivery to reach the handler") { seen.count >= 2 }
        watcher.cancel()
        #expect(seen.count >= 2)
    }

    /// Whether `number` is pending for this process (delivered, not yet taken).
    static func isPending(_ number: Int32) -> Bool {
        var pending = sigset_t()
        sigpending(&pending)
        return sigismember(&pending, number) == 1
    }
}
