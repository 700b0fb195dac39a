internal import Dispatch

#if canImport(Glibc)
internal import Glibc
#elseif canImport(Musl)
internal import Musl
#elseif canImport(Darwin)
internal import Darwin
#endif

/// Calls a handler on each delivery of any of a set of Unix signals, on a queue of its own, until
/// cancelled: the one way EffectLoop watches signals (``SignalSource`` is built on it).
///
/// ```swift
/// let watcher = SignalWatcher([.terminate, .interrupt]) { _ in node.stop() }
/// defer { watcher.cancel() }
/// ```
///
/// - The handler is called one call at a time, and at least once after each delivery: deliveries of one
///   signal that arrive together, or while a call is under way, may be merged into one call (the kernel
///   keeps one pending delivery per signal, and libdispatch merges what arrives before its next call).
/// - The signals are caught from the moment it is made: a signal whose disposition is the default one
///   is ignored until its watcher is installed, so a delivery in between is dropped, never fatal; a
///   disposition that is not the default (libdispatch's own handler from an earlier watch, or the
///   application's) is read, never changed. After ``cancel()`` the signals stay caught (by libdispatch,
///   which drops them), unless it was made with `restoringDisposition: true` (see ``SignalSource`` for
///   when that is safe).
/// - ``cancel()`` waits for a handler call under way, then releases the handler with everything it
///   holds: nothing it captured outlives the watch (a handler kept until the process exits is what
///   LeakSanitizer reports as a leak). A handler may cancel its own watcher (the handler is then
///   released once that call returns); it must not wait for something that waits for this watcher's
///   ``cancel()``.
public final class SignalWatcher: Sendable {
    /// The handler, the dispatch sources and the dispositions found, touched on `queue` only.
    private final class Watch: @unchecked Sendable {
        // @unchecked: every read and write of these happens on `queue` (the handlers run there, and
        // `cancel` runs there through `onQueue`), so no two threads touch them at once.
        var handler: (@Sendable (ProcessSignal) -> Void)?
        var sources: [any DispatchSourceSignal] = []
        /// Each signal whose default disposition the watcher replaced by "ignore", to put back.
        var ignored: [ProcessSignal] = []
    }

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
    ///   - restoringDisposition: whether ``cancel()`` puts back the default disposition of each signal
    ///     that had it when the watch began; by default the signals stay caught.
    ///   - handler: called after each delivery (deliveries close together may share a call), one call
    ///     at a time.
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
                // process. Any other disposition stays as it is: writing over libdispatch's handler
                // would leave every watcher of the signal deaf, as libdispatch installs it only once.
                if Self.hasDefaultDisposition(processSignal.rawValue) {
                    _ = signal(processSignal.rawValue, SIG_IGN)
                    watch.ignored.append(processSignal)
                }
                let source = DispatchSource.makeSignalSource(signal: processSignal.rawValue, queue: queue)
                source.setEventHandler { watch.handler?(processSignal) }
                source.resume()
                watch.sources.append(source)
            }
        }
    }

    /// Stops watching: it waits for a handler call under way, no call starts after it returns, and the
    /// handler is released. Called again, it does nothing.
    public func cancel() {
        let (watch, restoring) = (self.watch, self.restoring)
        onQueue {
            watch.handler = nil
            for source in watch.sources { source.cancel() }
            watch.sources = []
            if restoring {
                for processSignal in watch.ignored { _ = signal(processSignal.rawValue, SIG_DFL) }
            }
            watch.ignored = []
        }
    }

    deinit {
        cancel()
    }

    /// Whether `number`'s disposition is the default one, read without changing it.
    private static func hasDefaultDisposition(_ number: Int32) -> Bool {
        var current = sigaction()
        guard sigaction(number, nil, &current) == 0 else { return false }
        #if canImport(Glibc)
        let handler = current.__sigaction_handler.sa_handler
        #elseif canImport(Musl)
        let handler = current.__sa_handler.sa_handler
        #elseif canImport(Darwin)
        let handler = current.__sigaction_u.__sa_handler
        #endif
        return unsafeBitCast(handler, to: Int.self) == unsafeBitCast(SIG_DFL, to: Int.self)
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
