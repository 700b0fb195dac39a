internal import Dispatch

#if canImport(Glibc)
internal import Glibc
#elseif canImport(Musl)
internal import Musl
#elseif canImport(Darwin)
internal import Darwin
#endif

/// Calls a handler on each delivery of any of a set of Unix signals, one delivery at a time, until
/// cancelled: the one way EffectLoop watches signals (``SignalSource`` is built on it).
///
/// ```swift
/// let watcher = SignalWatcher([.terminate, .interrupt]) { _ in node.stop() }
/// defer { watcher.cancel() }
/// ```
///
/// - The signals are caught from the moment it is made: a signal whose disposition is the default one
///   is ignored until its watcher is installed, so a delivery in between is dropped, never fatal. After ``cancel()``
///   they stay caught (by libdispatch, which drops them), unless it was made with
///   `restoringDisposition: true` (see ``SignalSource`` for when that is safe).
/// - ``cancel()`` releases the handler before it returns, with everything the handler holds: nothing
///   it captured outlives the watch (a handler kept until the process exits is what LeakSanitizer
///   reports as a leak). A handler may cancel its own watcher.
public final class SignalWatcher: Sendable {
    /// The handler, the dispatch sources and the dispositions found, touched on `queue` only.
    private final class Watch: @unchecked Sendable {
        // @unchecked: every read and write of these happens on `queue` (the handlers run there, and
        // `cancel` runs there through `onQueue`), so no two threads touch them at once.
        var handler: (@Sendable (ProcessSignal) -> Void)?
        var sources: [any DispatchSourceSignal] = []
        var previous: [(ProcessSignal, Disposition?)] = []
    }

    /// A signal's disposition, as `signal` takes and returns it.
    private typealias Disposition = @convention(c) (Int32) -> Void

    private let queue: DispatchQueue
    private let watch = Watch()
    private let restoring: Bool
    /// Marks each watcher's queue with its watch, so `cancel` knows when it runs on its own queue
    /// already (from a handler), and not on another watcher's.
    private static let queueKey = DispatchSpecificKey<ObjectIdentifier>()

    /// Starts watching `signals`; `handler` is called on a queue of the watcher's own with each delivery.
    ///
    /// - Parameters:
    ///   - signals: the signals to watch.
    ///   - restoringDisposition: whether each signal's disposition found now is put back by
    ///     ``cancel()``; by default the signals stay caught.
    ///   - handler: called with each delivery, one at a time.
    public init(
        _ signals: [ProcessSignal],
        restoringDisposition: Bool = false,
        handler: @escaping @Sendable (ProcessSignal) -> Void
    ) {
        queue = DispatchQueue(label: "EffectLoop.SignalWatcher")
        restoring = restoringDisposition
        let watch = self.watch
        queue.setSpecific(key: Self.queueKey, value: ObjectIdentifier(watch))
        queue.sync {
            watch.handler = handler
            for processSignal in signals {
                // Ignored until its watcher is in place, so a delivery in between does not end the
                // process; a disposition that is not the default (libdispatch's own handler, from an
                // earlier watch of the signal) is put back at once and kept.
                let found = signal(processSignal.rawValue, SIG_IGN)
                if !Self.isDefault(found) { _ = signal(processSignal.rawValue, found) }
                watch.previous.append((processSignal, found))
                let source = DispatchSource.makeSignalSource(signal: processSignal.rawValue, queue: queue)
                source.setEventHandler { watch.handler?(processSignal) }
                source.resume()
                watch.sources.append(source)
            }
        }
    }

    /// Stops watching: no handler call starts after it returns, and the handler is released. Called
    /// again, it does nothing.
    public func cancel() {
        let (watch, restoring) = (self.watch, self.restoring)
        onQueue {
            watch.handler = nil
            for source in watch.sources { source.cancel() }
            watch.sources = []
            if restoring {
                for (processSignal, previous) in watch.previous { _ = signal(processSignal.rawValue, previous) }
            }
            watch.previous = []
        }
    }

    deinit {
        cancel()
    }

    private static func isDefault(_ disposition: Disposition?) -> Bool {
        unsafeBitCast(disposition, to: Int.self) == unsafeBitCast(SIG_DFL, to: Int.self)
    }

    /// Runs `body` on `queue`, at once if this is it already (a handler cancelling its own watcher).
    private func onQueue(_ body: () -> Void) {
        if DispatchQueue.getSpecific(key: Self.queueKey) == ObjectIdentifier(watch) {
            body()
        } else {
            queue.sync(execute: body)
        }
    }
}
