import EffectHandlers
import EventSources
import LoopCore
import LoopRuntime
import LoopTesting
import Synchronization
import Testing

/// A loop whose processing a test can hold: ``hold()`` has a thread process an event whose
/// synchronous effect spins until ``release()``, so the test can fill the inbox meanwhile.
final class BusyLoop: Sendable {
    let recorder = Recorder<Jobs.Event, Jobs.Effect>()
    let loop: Loop<Jobs.State, Jobs.Event, Jobs.Effect>
    private let holder = Locked<OSThread?>(nil)
    private let spin: Spin

    init(_ policy: InboxPolicy, sources: [any EventSource<Jobs.Event>] = []) {
        let box = Spin()
        let router = EffectRouter<Jobs.Effect, Jobs.Event>()
            .route(
                { if case .echo(let name) = $0 { name } else { nil } },
                to: ClosureSyncEffectHandler { _, _ in box.spin() }
            )
        loop = Loop(program: Jobs.program, effects: router, sources: sources, inbox: policy, observer: recorder)
        spin = box
    }

    /// Holds the loop: returns once a thread is spinning inside an effect, with the loop draining.
    func hold() async {
        let loop = self.loop
        holder.withLock { $0 = OSThread { loop.send(.run([.echo("hold")])) } }
        await waitUntil { spin.entered }
    }

    /// Lets the held thread go on and waits for it to finish processing.
    func release() {
        spin.release()
        holder.withLock { $0 }?.join()
    }

    /// The spinning effect's flags.
    private final class Spin: Sendable {
        private let inside = Atomic<Bool>(false)
        private let free = Atomic<Bool>(false)

        var entered: Bool { inside.load(ordering: .sequentiallyConsistent) }

        func spin() {
            inside.store(true, ordering: .sequentiallyConsistent)
            while !free.load(ordering: .sequentiallyConsistent) {}
        }

        func release() {
            free.store(true, ordering: .sequentiallyConsistent)
        }
    }
}
