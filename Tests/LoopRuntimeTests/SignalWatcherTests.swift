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

    /// Delivers `signal` to this process until `seen` holds one more delivery than it did.
    static func deliver(_ signal: ProcessSignal, until seen: Seen) async {
        let before = seen.count
        await waitUntil("a \(signal) delivery to be handled") {
            kill(getpid(), signal.rawValue)
            return seen.count > before
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
        let watcher = SignalWatcher([Self.windowChange]) { signal in
            seen.signals.withLock { $0.append(signal) }
            cell.withLock { $0 }?.cancel()
        }
        cell.withLock { $0 = watcher }
        await Self.deliver(Self.windowChange, until: seen)
        // It cancelled itself without waiting for itself: later deliveries reach no handler.
        let later = Seen()
        let second = SignalWatcher([Self.windowChange]) { signal in later.signals.withLock { $0.append(signal) } }
        await Self.deliver(Self.windowChange, until: later)
        #expect(seen.count == 1)
        second.cancel()
        cell.withLock { $0 = nil }
    }
}
