import Dispatch
import EffectHandlers
import EventSources
import LoopCore
import LoopRuntime
import LoopTesting
import Synchronization
import Testing

/// A loop whose processing a test can hold: ``hold()`` has a thread process an event whose
/// synchronous effect blocks until ``release()``, so the test can fill the inbox meanwhile.
final class BusyLoop: Sendable {
    let recorder = Recorder<Jobs.Event, Jobs.Effect>()
    let loop: Loop<Jobs.State, Jobs.Event, Jobs.Effect>
    private let holder = Locked<OSThread?>(nil)
    private let gate: Gate

    init(_ policy: InboxPolicy, sources: [any EventSource<Jobs.Event>] = []) {
        let box = Gate()
        let router = EffectRouter<Jobs.Effect, Jobs.Event>()
            .route(
                { if case .echo(let name) = $0 { name } else { nil } },
                to: ClosureSyncEffectHandler { _, _ in box.pass() }
            )
        loop = Loop(program: Jobs.program, effects: router, sources: sources, inbox: policy, observer: recorder)
        gate = box
    }

    /// Holds the loop: returns once a thread is blocked inside an effect, with the loop draining.
    func hold() async {
        let loop = self.loop
        holder.withLock { $0 = OSThread { loop.send(.run([.echo("hold")])) } }
        await waitUntil { gate.entered }
    }

    /// Lets the held thread go on and waits for it to finish processing.
    func release() {
        gate.release()
        holder.withLock { $0 }?.join()
    }

    /// The holding effect's gate. It blocks its thread (a thread of its own, not the concurrency pool's)
    /// rather than spinning on it: a test holding a spinning thread took a processor from every other
    /// test of the process, and with several held at once the whole suite crawled (ci: a durable group's
    /// graceful stop ran out of its 30 s grace while nine such threads spun on two processors).
    private final class Gate: Sendable {
        private let inside = Atomic<Bool>(false)
        private let open = DispatchSemaphore(value: 0)

        var entered: Bool { inside.load(ordering: .sequentiallyConsistent) }

        /// Blocks until ``release()``; at once after it.
        func pass() {
            inside.store(true, ordering: .sequentiallyConsistent)
            open.wait()
            // Open for every later pass too.
            open.signal()
        }

        func release() {
            open.signal()
        }
    }
}
